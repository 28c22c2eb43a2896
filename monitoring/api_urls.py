"""API routes of the monitor (console.urls includes them under /api/v1/)."""

from rest_framework.routers import DefaultRouter

from .api import JobDiagnosisViewSet


class _JobRoutes(DefaultRouter):
    """Routed as jobs.urls' router routes (format suffixes included), without a second API root."""

    include_root_view = False


router = _JobRoutes()
router.register("jobs", JobDiagnosisViewSet, basename="job")

urlpatterns = router.urls
