"""Forms of the channel and event-rule pages. Each error is attached to the field
it is about and says what is accepted."""

from __future__ import annotations

from django import forms

from jobs.inputs import InputError, parse_int
from jobs.models import NOTIFIABLE_EVENT_TYPES

from .models import Channel, ChannelKind, EventRule, JobScope, new_signing_secret
from .transports import TRANSPORTS, InvalidChannelURL, transport_for


class IdsField(forms.ModelMultipleChoiceField):
    """Ticked rows by id: each id a whole number from 1 to the largest a database id
    holds (jobs.inputs.parse_int, as the API's ids) before the database sees it.
    Django's own check hands any digits to the query, and an id above 2^63-1 raised
    OverflowError on SQLite: a 500 where the API answered 400 (issue 31, finding 4)."""

    def _check_values(self, value):
        for raw in value if isinstance(value, (list, tuple)) else [value]:
            try:
                parse_int(raw, self.label or "id", minimum=1)
            except InputError as exc:
                raise forms.ValidationError(f"Each id {exc.message}", code="invalid_pk_value") from exc
        return super()._check_values(value)


class ChannelForm(forms.ModelForm):
    rotate_secret = forms.BooleanField(
        required=False, label="Generate a new signing secret", help_text="Webhook receivers must then use the new one."
    )

    class Meta:
        model = Channel
        fields = ["name", "kind", "url"]
        widgets = {"url": forms.TextInput(attrs={"size": 80, "autocomplete": "off", "spellcheck": "false"})}
        labels = {"url": "URL"}
        help_texts = {
            "url": "Webhook: http(s) URL. Chat and e-mail: the service's Apprise URL, "
            "e.g. slack://…, discord://…, tgram://…, mmosts://…, dingtalk://…, feishu://…, "
            "wecombot://…, mailtos://…, jsons://…"
        }

    def __init__(self, *args, workspace, **kwargs):
        super().__init__(*args, **kwargs)
        self.workspace = workspace
        if not self.instance.pk:
            del self.fields["rotate_secret"]

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the channel a name.")
        taken = Channel.objects.filter(workspace=self.workspace, name__iexact=name).exclude(pk=self.instance.pk)
        if taken.exists():
            raise forms.ValidationError(f"This workspace already has a channel named “{name}”.")
        return name

    def clean(self):
        cleaned = super().clean()
        kind, url = cleaned.get("kind"), cleaned.get("url")
        if kind and url:
            if kind not in TRANSPORTS:
                self.add_error("kind", f"Choose one of: {', '.join(ChannelKind.values)}.")
            else:
                try:
                    cleaned["url"] = transport_for(kind).validate_url(url)
                except InvalidChannelURL as exc:
                    self.add_error("url", str(exc))
        return cleaned

    def save(self, commit=True):
        channel = super().save(commit=False)
        channel.workspace = self.workspace
        # Saving is how an admin says "fixed": a disabled channel comes back on.
        channel.enabled = True
        channel.disabled_reason = ""
        channel.disabled_at = None
        if self.cleaned_data.get("rotate_secret"):
            channel.signing_secret = new_signing_secret()
        if commit:
            channel.save()
        return channel


class EventRuleForm(forms.ModelForm):
    event_types = forms.MultipleChoiceField(
        choices=[(t.value, t.label) for t in NOTIFIABLE_EVENT_TYPES],
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Tick at least one event type."},
    )
    job_scope = forms.ChoiceField(choices=JobScope.choices, widget=forms.RadioSelect, initial=JobScope.ALL)
    channels = IdsField(
        queryset=Channel.objects.none(),
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one channel (add one on the Channels page first)."},
    )

    class Meta:
        model = EventRule
        fields = ["name", "event_types", "job_scope", "job_pattern", "channels", "enabled"]
        labels = {"job_pattern": "Job name pattern"}
        help_texts = {
            "job_pattern": "A glob over the job's name, case-insensitive: * any text, ? one character, "
            "[abc] one of. Example: resnet-*"
        }

    def __init__(self, *args, workspace, **kwargs):
        super().__init__(*args, **kwargs)
        self.workspace = workspace
        self.fields["channels"].queryset = Channel.objects.filter(workspace=workspace).order_by("name")

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the rule a name.")
        return name

    def clean(self):
        cleaned = super().clean()
        pattern = (cleaned.get("job_pattern") or "").strip()
        if cleaned.get("job_scope") == JobScope.PATTERN:
            if not pattern:
                self.add_error("job_pattern", "Type a pattern (e.g. resnet-*) or choose All jobs.")
            elif len(pattern) > 200:
                self.add_error("job_pattern", "At most 200 characters.")
        cleaned["job_pattern"] = pattern if cleaned.get("job_scope") == JobScope.PATTERN else ""
        return cleaned

    def save(self, commit=True):
        rule = super().save(commit=False)
        rule.workspace = self.workspace
        if commit:
            rule.save()
            self.save_m2m()
        return rule


class DeliveryFilterForm(forms.Form):
    type = forms.ChoiceField(
        required=False, choices=[("", "All event types")] + [(t.value, t.label) for t in NOTIFIABLE_EVENT_TYPES]
    )
