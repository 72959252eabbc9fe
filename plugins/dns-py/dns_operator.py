"""The DNS example operator in Python: a ``DNSRecord``
(demo.wasmctrl.dev/v1alpha1) becomes a record at an HTTP DNS provider — the
same job, settings and behaviour towards the cluster as the Rust
``plugins/dns``.

- Every reconcile reads the remote record and puts it back when it is
  missing or differs from the spec (type, value, ttl), so a record changed
  at the provider is repaired at the next resync.
- The finalizer ``dns.demo.wasmctrl.dev/record`` deletes the remote record
  before the DNSRecord goes away.
- ``status.conditions[Ready]`` is True (``Synced``) once the provider holds
  the spec, else False (``ProviderError`` with the provider's answer); a
  provider error is transient, so the key backs off and is retried.
- The plugin never sees the provider's token: every request carries
  ``Authorization: Bearer ${secret:NAME}``, which the host fills in toward
  the secret's hosts only.

Settings: ``{"endpoint": "http://127.0.0.1:8053", "zone": "example.com",
"secret": "dns-token"}`` (``secret`` optional).
"""

import json
import re

from wasmctrl_sdk import (
    Action,
    Api,
    Apply,
    Cleanup,
    Kind,
    Metadata,
    ObjectKey,
    PermanentError,
    Reconciler,
    TransientError,
    conditions,
    export,
    finalizer,
    http,
    objects,
    secrets,
)

MANAGER = "dns"
VERSION = "0.1.0"
FINALIZER = "dns.demo.wasmctrl.dev/record"
#: How often a synced record is read again (seconds), to repair changes
#: made at the provider, which sends no events.
RESYNC = 300

DNS_RECORD = Kind("demo.wasmctrl.dev", "v1alpha1", "DNSRecord", "dnsrecords")

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")


class ProviderError(TransientError):
    """The provider did not answer as asked; retried with backoff."""


class Provider:
    """The provider's API, as the plugin's settings name it."""

    def __init__(self, settings: dict):
        endpoint, zone = settings.get("endpoint"), settings.get("zone")
        secret = settings.get("secret", "dns-token")
        if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
            raise PermanentError("settings.endpoint must be an http:// or https:// URL")
        if not isinstance(zone, str) or not _NAME.match(zone):
            raise PermanentError("settings.zone must be a DNS name")
        if not isinstance(secret, str) or not _NAME.match(secret):
            raise PermanentError("settings.secret must be a secret's name")
        self.endpoint = endpoint.rstrip("/")
        self.zone = zone
        self.authorization = "Bearer " + secrets.placeholder(secret)

    def url(self, name: str) -> str:
        return f"{self.endpoint}/zones/{self.zone}/records/{name}"

    def send(self, method: str, name: str, body: bytes = b"") -> http.Response:
        headers = [("authorization", self.authorization)]
        if body:
            headers.append(("content-type", "application/json"))
        return http.send(http.Request(method, self.url(name), headers, body))

    def get(self, name: str):
        answer = self.send("GET", name)
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise ProviderError(f"GET {self.url(name)} answered {answer.status}")
        try:
            return answer.json()
        except http.HttpError:
            return None

    def put(self, name: str, record: dict) -> None:
        answer = self.send("PUT", name, json.dumps(record).encode())
        if answer.status != 200:
            raise ProviderError(f"PUT {self.url(name)} answered {answer.status}")

    def delete(self, name: str) -> None:
        answer = self.send("DELETE", name)
        if answer.status not in (204, 404):
            raise ProviderError(f"DELETE {self.url(name)} answered {answer.status}")


def desired(record: dict) -> tuple[str, dict]:
    """The record's name and what the provider should hold for it."""
    spec = record.get("spec")
    if not isinstance(spec, dict):
        raise PermanentError(f"the DNSRecord {objects.name(record)} has no spec")
    name, type_, value, ttl = spec.get("name"), spec.get("type"), spec.get("value"), spec.get("ttl", 300)
    if not isinstance(name, str) or not _NAME.match(name):
        raise PermanentError(f"spec.name {name!r} is not a DNS name")
    if not isinstance(type_, str) or not isinstance(value, str):
        raise PermanentError("spec.type and spec.value must be strings")
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        raise PermanentError("spec.ttl must be an integer")
    return name, {"type": type_, "value": value, "ttl": ttl}


@export
class DnsReconciler(Reconciler):
    def metadata(self) -> Metadata:
        # No outbound declaration: the endpoint comes from the settings, so
        # the host's grant for this plugin is the only list of destinations.
        return (
            Metadata(MANAGER, VERSION, DNS_RECORD)
            .permission(DNS_RECORD.group, ["dnsrecords"], ["get", "list", "watch", "patch"])
            .permission(DNS_RECORD.group, ["dnsrecords/status"], ["patch"])
        )

    def reconcile(self, key: ObjectKey, ctx) -> Action:
        records = Api.namespaced(DNS_RECORD, key.require_namespace())
        record = records.get_opt(key.name)
        if record is None:
            # Gone: its finalizer already removed the remote record.
            return Action.done()
        provider = Provider(ctx.settings() or {})

        def handle(event) -> Action:
            match event:
                case Apply(obj):
                    return apply(records, provider, obj)
                case Cleanup(obj):
                    name, _ = desired(obj)
                    provider.delete(name)
                    return Action.done()

        return finalizer(records, FINALIZER, record, handle)


def apply(records: Api, provider: Provider, obj: dict) -> Action:
    name, want = desired(obj)
    try:
        if provider.get(name) != want:
            provider.put(name, want)
    except (ProviderError, http.HttpError) as e:
        write_ready(records, obj, False, "ProviderError", str(e))
        raise
    write_ready(records, obj, True, "Synced", f"{name}.{provider.zone} {want['type']} {want['value']}")
    return Action.requeue_after(RESYNC)


def write_ready(records: Api, obj: dict, ready: bool, reason: str, message: str) -> None:
    generation = objects.meta(obj).get("generation")
    old = (obj.get("status") or {}).get("conditions") or []
    current = conditions.get(old, "Ready") or {}
    if (
        (obj.get("status") or {}).get("observedGeneration") == generation
        and current.get("status") == ("True" if ready else "False")
        and current.get("reason") == reason
        and current.get("message") == message
    ):
        return
    ready_condition = conditions.new("Ready", ready, reason, message, observed_generation=generation)
    status = {"observedGeneration": generation, "conditions": [ready_condition]}
    records.apply_status(objects.name(obj), status, MANAGER, True)
