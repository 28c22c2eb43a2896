"""/api/v1/workspaces/<workspace>/notifications/... (included by console.urls)."""

from rest_framework.routers import SimpleRouter

from .api import ChannelViewSet, DeliveryViewSet, EventRuleViewSet

router = SimpleRouter()
base = r"workspaces/(?P<workspace>[^/.]+)/notifications/"
router.register(base + "channels", ChannelViewSet, basename="notification-channel")
router.register(base + "rules", EventRuleViewSet, basename="notification-rule")
router.register(base + "deliveries", DeliveryViewSet, basename="notification-delivery")

urlpatterns = router.urls
