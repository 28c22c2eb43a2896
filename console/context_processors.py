"""What every page's shell needs: the caller's workspaces for the switcher, the
current one, and the navigation links that exist (apps add pages as they land)."""

from django.urls import NoReverseMatch, get_resolver, reverse

from jobs.models import Workspace


def workspaces(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    mine = list(Workspace.objects.for_user(user).order_by("name"))
    match = getattr(request, "resolver_match", None)
    slug = (match.kwargs.get("slug") if match else None) or request.session.get("workspace")
    current = next((w for w in mine if w.slug == slug), None)
    return {
        "my_workspaces": mine,
        "current_workspace": current,
        "notifications_url": notifications_url(current.slug) if current else None,
    }


def notifications_url(slug: str) -> str | None:
    """The notifications pages of a workspace, once that app has them: the first
    URL in the `notifications` namespace that takes only the workspace slug."""
    resolver = get_resolver()
    if "notifications" not in resolver.namespace_dict:
        return None
    for name in ("index", "rules", "rule-list", "event-rules", "channels", "home"):
        try:
            return reverse(f"notifications:{name}", kwargs={"slug": slug})
        except NoReverseMatch:
            continue
    _, sub = resolver.namespace_dict["notifications"]
    for pattern in getattr(sub, "url_patterns", []):
        name = getattr(pattern, "name", None)
        if not name:
            continue
        try:
            return reverse(f"notifications:{name}", kwargs={"slug": slug})
        except NoReverseMatch:
            continue
    return None
