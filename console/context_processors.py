"""What every page's shell needs: the caller's workspaces for the switcher, the
current one, and the link to its notifications pages."""

from django.urls import reverse

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


def notifications_url(slug: str) -> str:
    """The workspace's notifications pages (console.urls always includes them)."""
    return reverse("notifications:index", kwargs={"slug": slug})
