from rest_framework.routers import DefaultRouter

from .api import JobViewSet, WorkspaceViewSet
from .nodes_api import NodeViewSet

router = DefaultRouter()
router.register("workspaces", WorkspaceViewSet, basename="workspace")
router.register("jobs", JobViewSet, basename="job")
router.register("nodes", NodeViewSet, basename="node")

urlpatterns = router.urls
