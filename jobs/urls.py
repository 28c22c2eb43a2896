from rest_framework.routers import DefaultRouter

from .api import JobViewSet, WorkspaceViewSet

router = DefaultRouter()
router.register("workspaces", WorkspaceViewSet, basename="workspace")
router.register("jobs", JobViewSet, basename="job")

urlpatterns = router.urls
