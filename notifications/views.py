"""Pages for channels, event rules and a rule's delivery log. Everyone in the
workspace sees them (members and viewers with channel URLs masked); owners and
admins change them; people outside the workspace get 404."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from jobs.inputs import query_int
from jobs.models import ADMIN_ROLES, Workspace

from . import dispatch
from .backtest import rule_backtest
from .forms import ChannelForm, DeliveryFilterForm, EventRuleForm
from .models import Channel, Delivery, EventRule


def _workspace(request, slug) -> tuple[Workspace, bool]:
    workspace = Workspace.objects.for_user(request.user).filter(slug=slug).first()
    if workspace is None:
        raise Http404("No such workspace.")
    role = workspace.role_of(request.user)
    return workspace, role in ADMIN_ROLES


def _admin_workspace(request, slug) -> Workspace:
    workspace, is_admin = _workspace(request, slug)
    if not is_admin:
        raise PermissionDenied("Only the workspace's owners and admins change notifications.")
    return workspace


def _context(workspace, is_admin, **extra):
    return {"workspace": workspace, "is_admin": is_admin, **extra}


def _admin_object(request, slug, model, pk):
    """The workspace and its channel or rule `pk`, for a change only an admin makes."""
    workspace = _admin_workspace(request, slug)
    return workspace, get_object_or_404(model, pk=pk, workspace=workspace)


def _form_page(request, slug, form_class, pk, *, back, template, name):
    """A channel's or a rule's add (`pk` None) or edit page: a valid POST saves (a new one
    records who made it) and goes back to the list; anything else shows the form again."""
    model = form_class._meta.model
    workspace = _admin_workspace(request, slug)
    thing = None if pk is None else get_object_or_404(model, pk=pk, workspace=workspace)
    form = form_class(request.POST or None, instance=thing, workspace=workspace)
    if request.method == "POST" and form.is_valid():
        if form.instance.pk is None:
            form.instance.created_by = request.user
        form.save()
        return redirect(back, slug=workspace.slug)
    return render(request, template, _context(workspace, True, form=form, **{name: thing}))


def _delete_page(request, workspace, thing, *, name, back):
    """Asks before deleting a channel or a rule; the POST deletes it and goes back to the list."""
    if request.method == "POST":
        thing.delete()
        return redirect(back, slug=workspace.slug)
    return render(
        request,
        "notifications/confirm_delete.html",
        _context(workspace, True, thing=name, back=back),
    )


@login_required
def index(request, slug):
    workspace, _ = _workspace(request, slug)
    return redirect("notifications:rules", slug=workspace.slug)


# --- channels ----------------------------------------------------------------------


@login_required
def channel_list(request, slug):
    workspace, is_admin = _workspace(request, slug)
    channels = list(Channel.objects.filter(workspace=workspace).order_by("name"))
    for channel in channels:
        channel.last = channel.last_delivery()
        channel.is_failing = channel.failing
    tested = None
    tested_id = query_int(request.GET, "tested", minimum=1)
    if tested_id is not None:
        tested = (
            Delivery.objects.select_related("channel")
            .filter(pk=tested_id, channel__workspace=workspace, is_test=True)
            .first()
        )
    return render(
        request, "notifications/channels.html", _context(workspace, is_admin, channels=channels, tested=tested)
    )


@login_required
def channel_form(request, slug, channel_id=None):
    """Add a channel, or edit channel `channel_id`."""
    return _form_page(
        request,
        slug,
        ChannelForm,
        channel_id,
        back="notifications:channels",
        template="notifications/channel_form.html",
        name="channel",
    )


@login_required
def channel_test(request, slug, channel_id):
    workspace, channel = _admin_object(request, slug, Channel, channel_id)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    delivery = dispatch.send_test(channel)
    return redirect(reverse("notifications:channels", kwargs={"slug": workspace.slug}) + f"?tested={delivery.pk}")


@login_required
def channel_delete(request, slug, channel_id):
    workspace, channel = _admin_object(request, slug, Channel, channel_id)
    return _delete_page(request, workspace, channel, name=f"channel “{channel.name}”", back="notifications:channels")


# --- event rules --------------------------------------------------------------------


@login_required
def rule_list(request, slug):
    workspace, is_admin = _workspace(request, slug)
    rules = EventRule.objects.filter(workspace=workspace).prefetch_related(
        Prefetch("channels", queryset=Channel.objects.order_by("name"))
    )
    return render(request, "notifications/rules.html", _context(workspace, is_admin, rules=rules))


@login_required
def rule_form(request, slug, rule_id=None):
    """Add an event rule, or edit rule `rule_id`."""
    return _form_page(
        request,
        slug,
        EventRuleForm,
        rule_id,
        back="notifications:rules",
        template="notifications/rule_form.html",
        name="rule",
    )


@login_required
@require_POST
def rule_preview(request, slug, rule_id=None):
    """The rule form's values tried on the workspace's past events (issue 26), validated
    as Save validates them; saves nothing. htmx gets the panel, a plain post the form
    page with the panel filled in."""
    workspace = _admin_workspace(request, slug)
    rule = None if rule_id is None else get_object_or_404(EventRule, pk=rule_id, workspace=workspace)
    form = EventRuleForm(request.POST, instance=rule, workspace=workspace)
    valid = form.is_valid()
    context = _context(
        workspace, True, form=form, rule=rule, preview=rule_backtest(workspace, form.cleaned_data) if valid else None
    )
    status = 200 if valid else 400
    if request.htmx:
        return render(request, "notifications/_rule_backtest.html", context, status=status)
    return render(request, "notifications/rule_form.html", context, status=status)


@login_required
def rule_toggle(request, slug, rule_id):
    workspace, rule = _admin_object(request, slug, EventRule, rule_id)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    EventRule.objects.filter(pk=rule.pk).update(enabled=not rule.enabled)
    return redirect("notifications:rules", slug=workspace.slug)


@login_required
def rule_delete(request, slug, rule_id):
    workspace, rule = _admin_object(request, slug, EventRule, rule_id)
    return _delete_page(request, workspace, rule, name=f"event rule “{rule.name}”", back="notifications:rules")


@login_required
def rule_deliveries(request, slug, rule_id):
    workspace, is_admin = _workspace(request, slug)
    rule = get_object_or_404(EventRule, pk=rule_id, workspace=workspace)
    return _deliveries_page(request, workspace, is_admin, rule)


@login_required
@require_POST
def redeliver(request, slug, rule_id, delivery_id):
    """One more try of a finished delivery (dispatch.redeliver, as the API's
    redeliver); the log shows the outcome when the task has run."""
    workspace, rule = _admin_object(request, slug, EventRule, rule_id)
    delivery = get_object_or_404(Delivery, pk=delivery_id, matched_rules=rule, channel__workspace=workspace)
    try:
        dispatch.redeliver(delivery)
    except dispatch.CannotRedeliver as exc:
        return _deliveries_page(request, workspace, True, rule, refused=(delivery, str(exc)), status=409)
    return redirect(
        reverse("notifications:rule-deliveries", kwargs={"slug": workspace.slug, "rule_id": rule.pk})
        + f"?redelivered={delivery.pk}"
    )


def _deliveries_page(request, workspace, is_admin, rule, refused=None, status=200):
    form = DeliveryFilterForm(request.GET or None)
    deliveries = (
        Delivery.objects.filter(matched_rules=rule)
        .select_related("event__job", "channel")
        .order_by("-created_at", "-id")
    )
    event_type = ""
    if form.is_valid() and form.cleaned_data.get("type"):
        event_type = form.cleaned_data["type"]
        deliveries = deliveries.filter(event__type=event_type)
    page = Paginator(deliveries, 50).get_page(request.GET.get("page"))
    # Each channel on the page once: its failing state is a query of its own.
    failing = {}
    for delivery in page.object_list:
        if delivery.channel_id not in failing:
            failing[delivery.channel_id] = delivery.channel.failing
        delivery.channel_failing = failing[delivery.channel_id]
    redelivered = query_int(request.GET, "redelivered", minimum=1)
    return render(
        request,
        "notifications/deliveries.html",
        _context(
            workspace,
            is_admin,
            rule=rule,
            form=form,
            page=page,
            event_type=event_type,
            refused=refused,
            redelivered=redelivered,
        ),
        status=status,
    )
