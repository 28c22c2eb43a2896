def workspaces(request):
    """The caller's workspaces for the switcher in the page shell."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    from jobs.models import Workspace

    return {"my_workspaces": Workspace.objects.for_user(user).order_by("name")}
