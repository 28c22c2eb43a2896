"""`vigil`: the console's REST API from a terminal or a CI script.

    vigil login --url https://vigil.example.com         # asks for the API token
    vigil submit job.yaml --set envs.LR=0.1 --set job_specs.1.pod_count=4
    vigil ls
    vigil status 42 --wait                              # exit code: how the job ended
    vigil logs 42 -f --instance worker-0                # follows across restarts
    vigil events 42 -f
    vigil restarts 42
    vigil stop 42
    vigil stacks 42

Standard library only (PyYAML, from the `cli` extra, only to read YAML job
files), and never imported by `import vigil`: training images do not pay for it.
Every command prints a table for people or, with --json, JSON for scripts.

Exit codes (documented in `vigil --help` too):
    0  done; for status/logs -f/events -f/--wait: the job Succeeded (or is still live)
    1  the job Failed
    2  bad command-line usage
    3  the console refused the request (the API's field messages are printed)
    4  not logged in, or the token was refused (401/403)
    5  no such job or workspace (404)
    6  the console cannot be reached, or failed (network error, 5xx)
    7  the job was Stopped
    8  gave up waiting (--timeout)
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from vigil import __version__

OK, JOB_FAILED, USAGE, REFUSED, AUTH, NOT_FOUND, UNREACHABLE, JOB_STOPPED, TIMED_OUT = range(9)
FINISHED = ("Succeeded", "Failed", "Stopped")
EXIT_FOR_STATUS = {"Failed": JOB_FAILED, "Stopped": JOB_STOPPED}
EXIT_CODES_HELP = """exit codes:
  0  done; with --wait / -f: the job Succeeded (without them: the job is not Failed or Stopped)
  1  the job Failed
  2  bad command-line usage
  3  the console refused the request (its field messages are printed)
  4  not logged in, or the token was refused
  5  no such job or workspace
  6  the console cannot be reached, or failed
  7  the job was Stopped
  8  gave up waiting (--timeout)

configuration: `vigil login` writes the URL and token to $XDG_CONFIG_HOME/vigil/config.json
(~/.config/vigil/config.json), readable only by you; VIGIL_API_URL and VIGIL_API_TOKEN
(or --url/--token) override it, e.g. in CI."""


class CliError(Exception):
    """A failure to report on stderr with an exit code; never a traceback."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.message = message
        self.code = code


# --- configuration -----------------------------------------------------------------


def config_path() -> str:
    if os.environ.get("VIGIL_CONFIG"):
        return os.environ["VIGIL_CONFIG"]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "vigil", "config.json")


def read_config() -> Dict[str, str]:
    try:
        with open(config_path()) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliError("cannot read %s: %s; run `vigil login` again" % (config_path(), exc), AUTH) from None
    return data if isinstance(data, dict) else {}


def write_config(url: str, token: str) -> str:
    """Write atomically, created 0600 (the token is a password) in a 0700 directory."""
    path = config_path()
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "token": token}, f)
        f.write("\n")
    os.chmod(tmp, 0o600)  # in case the file existed with wider permissions
    os.replace(tmp, path)
    return path


# --- HTTP -------------------------------------------------------------------------


class Api:
    """A thin JSON client of /api/v1/ with the CLI's error mapping."""

    def __init__(self, url: str, token: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, params: Optional[Dict[str, Any]] = None) -> Any:
        url = path if path.startswith("http") else "%s/api/v1/%s" % (self.url, path.lstrip("/"))
        if params:
            query = {k: v for k, v in params.items() if v is not None}
            if query:
                url += ("&" if "?" in url else "?") + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            url,
            data=data,
            method=method,
            headers={
                "Authorization": "Bearer " + self.token,
                "Accept": "application/json",
                "User-Agent": "vigil-cli/" + __version__,
                **({"Content-Type": "application/json"} if data is not None else {}),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CliError("cannot reach the console at %s: %s" % (self.url, reason), UNREACHABLE) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise CliError(
                "the console at %s answered %s %s with something that is not JSON; is the URL "
                "right?" % (self.url, method, url),
                UNREACHABLE,
            ) from None

    def _refusal(self, exc: urllib.error.HTTPError) -> CliError:
        try:
            payload = json.loads(exc.read() or b"null")
        except ValueError:
            payload = None
        status = exc.code
        if status in (401, 403):
            text = _detail(payload) or "the token was refused"
            hint = "; run `vigil login`" if status == 401 else ""
            return CliError("%s (HTTP %d)%s" % (text, status, hint), AUTH)
        if status == 404:
            return CliError("%s (HTTP 404)" % (_detail(payload) or "not found"), NOT_FOUND)
        if 400 <= status < 500:
            return CliError(
                "the console refused the request (HTTP %d):\n%s" % (status, field_messages(payload)), REFUSED
            )
        return CliError("the console failed (HTTP %d): %s" % (status, _detail(payload) or exc.reason), UNREACHABLE)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body if body is not None else {})


def _detail(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("detail"), str):
        return payload["detail"]
    return ""


def field_messages(payload: Any, prefix: str = "") -> str:
    """DRF's error body as one `field.path: message` line each."""
    lines: List[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(sub, "%s.%s" % (path, key) if path else str(key))
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            for text in value:
                lines.append("  %s: %s" % (path or "request", text))
        elif isinstance(value, list):
            for i, sub in enumerate(value):
                if sub:
                    walk(sub, "%s.%d" % (path, i) if path else str(i))
        elif value not in (None, ""):
            lines.append("  %s: %s" % (path or "request", value))

    walk(payload, prefix)
    return "\n".join(lines) or "  (no details given)"


def connect(args: argparse.Namespace) -> Api:
    config = read_config()
    url = args.url or os.environ.get("VIGIL_API_URL") or config.get("url")
    token = args.token or os.environ.get("VIGIL_API_TOKEN") or config.get("token")
    if not url or not token:
        raise CliError("not logged in: run `vigil login --url URL` (or set VIGIL_API_URL and VIGIL_API_TOKEN)", AUTH)
    return Api(url, token, timeout=args.http_timeout)


# --- output -----------------------------------------------------------------------


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Left-aligned columns; on a terminal the last column is cut to its width."""
    text_rows = [["" if v is None else str(v).replace("\n", " ") for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    limit = shutil.get_terminal_size((200, 24)).columns if sys.stdout.isatty() else None
    for row in [list(headers)] + text_rows:
        line = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1]))
        line = (line + "  " if line else "") + row[-1]
        if limit and len(line) > limit:
            line = line[: max(limit - 1, 10)] + "…"
        sys.stdout.write(line.rstrip() + "\n")
    sys.stdout.flush()


def when(iso: Optional[str]) -> str:
    """An API timestamp as `YYYY-MM-DD HH:MM:SS` (UTC)."""
    if not iso:
        return ""
    return iso.replace("T", " ")[:19]


def restarts_of(job: Dict[str, Any]) -> str:
    return "%s/%s" % (job.get("restart_count", 0), job.get("max_restarts", "?"))


def exit_for(job: Dict[str, Any]) -> int:
    return EXIT_FOR_STATUS.get(job.get("status", ""), OK)


# --- reading job files ---------------------------------------------------------------


def load_job_file(path: str) -> Dict[str, Any]:
    if path == "-":
        text, name = sys.stdin.read(), "<stdin>"
    else:
        try:
            with open(path) as f:
                text, name = f.read(), path
        except OSError as exc:
            raise CliError("cannot read %s: %s" % (path, exc.strerror or exc), USAGE) from None
    if name.endswith(".json") or text.lstrip().startswith("{"):
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise CliError("%s is not valid JSON: %s" % (name, exc), USAGE) from None
    else:
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise CliError(
                "%s looks like YAML, and reading YAML needs PyYAML: pip install 'vigil[cli]' "
                "(or give the job as JSON)" % name,
                USAGE,
            ) from None
        try:
            body = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CliError("%s is not valid YAML: %s" % (name, exc), USAGE) from None
    if not isinstance(body, dict):
        raise CliError("%s must hold one mapping (the CreateJob body); got %s" % (name, type(body).__name__), USAGE)
    return body


def parse_value(raw: str) -> Any:
    """`--set` values: JSON where it parses (3, true, null, [..], {..}, "quoted"), else the text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def apply_override(body: Dict[str, Any], assignment: str) -> None:
    """`key.sub.0.field=value`: dotted keys into mappings, numbers into lists."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise CliError("--set takes key=value (e.g. --set envs.LR=0.1); got %r" % assignment, USAGE)
    parts = key.strip().split(".")
    node: Any = body
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise CliError(
                    "--set %s: %s has %d item(s); %r is not an index of it"
                    % (key, ".".join(parts[:i]) or "the body", len(node), part),
                    USAGE,
                )
            index = int(part)
            if last:
                node[index] = parse_value(raw)
            else:
                node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = parse_value(raw)
            else:
                node = node.setdefault(part, {})
        else:
            raise CliError(
                "--set %s: %s is a %s, not a mapping or list" % (key, ".".join(parts[:i]), type(node).__name__), USAGE
            )


# --- commands -----------------------------------------------------------------------


def cmd_login(args: argparse.Namespace) -> int:
    config = read_config()
    url = (args.url or os.environ.get("VIGIL_API_URL") or config.get("url") or "").rstrip("/")
    if not url:
        raise CliError("give the console's URL: vigil login --url https://vigil.example.com", USAGE)
    if urllib.parse.urlparse(url).scheme not in ("http", "https"):
        raise CliError("--url must start with http:// or https://; got %r" % url, USAGE)
    token = args.token or os.environ.get("VIGIL_API_TOKEN")
    if token == "-" or (not token and not sys.stdin.isatty()):
        token = sys.stdin.readline().strip()
    elif not token:
        token = getpass.getpass("API token for %s (Profile > API tokens, or first-start.txt): " % url).strip()
    if not token:
        raise CliError("no token given", USAGE)
    api = Api(url, token, timeout=args.http_timeout)
    workspaces = api.get("workspaces/")  # proves the URL and the token before anything is stored
    names = [w["slug"] for w in (workspaces.get("results", workspaces) if isinstance(workspaces, dict) else workspaces)]
    path = write_config(url, token)
    if args.json:
        emit_json({"url": url, "config": path, "workspaces": names})
    else:
        print("Logged in to %s; token stored in %s (mode 0600)." % (url, path))
        print("Workspaces: %s" % (", ".join(names) or "none yet"))
    return OK


def cmd_submit(args: argparse.Namespace) -> int:
    body = load_job_file(args.file)
    for assignment in args.set or []:
        apply_override(body, assignment)
    if args.workspace:
        body["workspace"] = args.workspace
    api = connect(args)
    job = api.post("jobs/", body)
    if args.json:
        emit_json(job)
    else:
        print(
            "Submitted job %s (%s) in %s: %s"
            % (job["id"], job.get("display_name", ""), job.get("workspace_slug", ""), job.get("status", ""))
        )
        print("  %s/workspaces/%s/jobs/%s/" % (api.url, job.get("workspace_slug", ""), job["id"]))
    if args.wait:
        return wait_for(api, job["id"], args)
    return OK


def cmd_ls(args: argparse.Namespace) -> int:
    api = connect(args)
    jobs: List[Dict[str, Any]] = []
    page: Any = api.get("jobs/", workspace=args.workspace, status=args.status, q=args.name)
    while True:
        jobs.extend(page.get("results", []))
        if not page.get("next") or len(jobs) >= args.limit:
            break
        page = api.get(page["next"])
    jobs = jobs[: args.limit]
    if args.json:
        emit_json(jobs)
        return OK
    table(
        ["ID", "NAME", "WORKSPACE", "STATUS", "RESTARTS", "CREATED", "LAST RESTART / REASON"],
        [
            [
                j["id"],
                j["display_name"],
                j["workspace_slug"],
                j["status"],
                restarts_of(j),
                when(j["created_at"]),
                j.get("last_restart_reason") or j.get("reason") or "",
            ]
            for j in jobs
        ],
    )
    return OK


def print_status(job: Dict[str, Any]) -> None:
    print("Job %s  %s  (%s, %s)" % (job["id"], job["display_name"], job["job_type"], job["workspace_slug"]))
    print("  status:    %s%s" % (job["status"], "  -- " + job["reason"] if job.get("reason") else ""))
    print("  attempt:   %s   restarts: %s" % (job["current_attempt"], restarts_of(job)))
    if job.get("last_restart_reason"):
        print("  last restart: %s" % job["last_restart_reason"])
    print(
        "  created:   %s   started: %s   finished: %s"
        % (when(job.get("created_at")), when(job.get("started_at")), when(job.get("finished_at")))
    )
    attempt = job.get("attempt") or {}
    instances = attempt.get("instances") or []
    if instances:
        print()
        table(
            ["INSTANCE", "RANK", "STATUS", "NODE", "EXIT", "LAST OUTPUT"],
            [
                [
                    i["name"],
                    i.get("rank"),
                    i["status"],
                    i.get("node") or "",
                    "" if i.get("exit_code") is None else i["exit_code"],
                    when(i.get("last_output_at")),
                ]
                for i in instances
            ],
        )


def wait_for(api: Api, job_id: Any, args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout if args.timeout else None
    job = api.get("jobs/%s/" % job_id)
    while job["status"] not in FINISHED:
        if deadline is not None and time.monotonic() >= deadline:
            raise CliError("job %s is still %s after %gs" % (job_id, job["status"], args.timeout), TIMED_OUT)
        time.sleep(args.interval)
        job = api.get("jobs/%s/" % job_id)
    if args.json:
        emit_json(job)
    else:
        print_status(job)
    return exit_for(job)


def cmd_status(args: argparse.Namespace) -> int:
    api = connect(args)
    if args.wait:
        return wait_for(api, args.job, args)
    job = api.get("jobs/%s/" % args.job)
    if args.json:
        emit_json(job)
    else:
        print_status(job)
    return exit_for(job)


class LogFollower:
    """Reads one instance's log through the logs API by byte offset, attempt after
    attempt: when the job restarts, the old attempt's log is read to its end, a
    separator is printed, and reading goes on at offset 0 of the next attempt."""

    def __init__(
        self,
        api: Api,
        job_id: Any,
        instance: Optional[str],
        attempt: Optional[int],
        as_json: bool,
        write: Callable[[str], None],
    ):
        self.api, self.job_id, self.instance, self.as_json, self.write = api, job_id, instance, as_json, write
        self.pinned = attempt is not None
        self.attempt = attempt
        self.offset = 0
        self.pending = b""

    def job(self) -> Dict[str, Any]:
        return self.api.get("jobs/%s/" % self.job_id)

    def instance_names(self, number: int) -> Optional[List[str]]:
        attempts = self.api.get("jobs/%s/attempts/" % self.job_id)
        for a in attempts:
            if a["number"] == number:
                return [i["name"] for i in sorted(a["instances"], key=lambda i: (i.get("rank") is None, i.get("rank")))]
        return None

    def ready(self) -> bool:
        """Whether the attempt has the instance yet; a misspelt instance is an error."""
        names = self.instance_names(self.attempt or 1)
        if not names:
            return False  # the attempt is still being created
        if self.instance is None:
            self.instance = names[0]
        if self.instance not in names:
            raise CliError(
                "%r is not an instance of attempt %s; it has: %s" % (self.instance, self.attempt, ", ".join(names)),
                REFUSED,
            )
        return True

    def drain(self) -> None:
        """Print everything after the offset (in chunks of up to 8 MiB)."""
        while True:
            chunk = self.api.get(
                "jobs/%s/logs/" % self.job_id, instance=self.instance, attempt=self.attempt, offset=self.offset
            )
            content = chunk.get("content", "")
            start, self.offset = self.offset, chunk.get("next_offset", self.offset)
            if not content:
                return
            if self.as_json:
                self.write(
                    json.dumps(
                        {"attempt": self.attempt, "instance": self.instance, "offset": start, "content": content}
                    )
                    + "\n"
                )
            else:
                self.write(content)
            if self.offset - start < 1024 * 1024:
                return

    def separator(self, job: Dict[str, Any]) -> None:
        reason = job.get("last_restart_reason") or ""
        if self.as_json:
            self.write(json.dumps({"attempt": self.attempt, "instance": self.instance, "restart": reason}) + "\n")
        else:
            self.write(
                "\n==== attempt %s of job %s%s ====\n"
                % (self.attempt, self.job_id, " (restart: %s)" % reason if reason else "")
            )

    def run(self, follow: bool, interval: float, timeout: Optional[float]) -> int:
        deadline = time.monotonic() + timeout if timeout else None
        job = self.job()
        if self.attempt is None:
            self.attempt = job["current_attempt"]
        elif not 1 <= self.attempt <= job["current_attempt"]:
            raise CliError(
                "job %s has attempts 1 to %s; there is no attempt %s"
                % (self.job_id, job["current_attempt"], self.attempt),
                NOT_FOUND,
            )
        started = False
        while True:
            if not started:
                started = self.ready()
            if started:
                self.drain()
            if not follow:
                if not started:
                    raise CliError("attempt %s of job %s has no instances yet" % (self.attempt, self.job_id), NOT_FOUND)
                return OK
            job = self.job()
            moved_on = self.attempt < job["current_attempt"]
            if started and (moved_on or job["status"] in FINISHED):
                self.drain()  # the attempt's processes are gone: this reads its log to the end
                if moved_on and not self.pinned:
                    self.attempt += 1
                    self.offset, started = 0, False
                    self.separator(job)
                    continue
                if job["status"] in FINISHED or self.pinned:
                    return exit_for(job) if job["status"] in FINISHED else OK
            elif not started and job["status"] in FINISHED and not self.ready():
                return exit_for(job)
            if deadline is not None and time.monotonic() >= deadline:
                raise CliError("job %s is still %s after %gs" % (self.job_id, job["status"], timeout), TIMED_OUT)
            time.sleep(interval)


def cmd_logs(args: argparse.Namespace) -> int:
    api = connect(args)

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    follower = LogFollower(api, args.job, args.instance, args.attempt, args.json, write)
    return follower.run(args.follow, args.interval, args.timeout)


def event_rows(events: List[Dict[str, Any]]) -> List[List[Any]]:
    return [
        [when(e["created_at"]), e["level"], e["type"], e.get("attempt") or "", e.get("instance") or "", e["message"]]
        for e in events
    ]


def cmd_events(args: argparse.Namespace) -> int:
    api = connect(args)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    last: Optional[int] = None
    header = True
    while True:
        job = api.get("jobs/%s/" % args.job) if args.follow else None
        events = api.get("jobs/%s/events/" % args.job, after=last, type=args.type)
        if events:
            last = events[-1]["id"]
            if args.json and args.follow:
                for e in events:  # one object per line, so that a follower can be piped
                    sys.stdout.write(json.dumps(e, sort_keys=True) + "\n")
            elif args.json:
                emit_json(events)
            else:
                rows = event_rows(events)
                if header:
                    table(["TIME", "LEVEL", "TYPE", "ATTEMPT", "INSTANCE", "MESSAGE"], rows)
                    header = False
                else:
                    for row in rows:
                        sys.stdout.write("  ".join(str(c) for c in row) + "\n")
            sys.stdout.flush()
        elif not args.follow and args.json:
            emit_json([])
        if not args.follow:
            return OK
        if job is not None and job["status"] in FINISHED:
            # Everything the job recorded up to its end was read after the status.
            return exit_for(job)
        if deadline is not None and time.monotonic() >= deadline:
            raise CliError("job %s is still live after %gs" % (args.job, args.timeout), TIMED_OUT)
        time.sleep(args.interval)


def cmd_restarts(args: argparse.Namespace) -> int:
    api = connect(args)
    records = api.get("jobs/%s/restarts/" % args.job)
    if args.json:
        emit_json(records)
        return OK
    if not records:
        print("Job %s has not restarted." % args.job)
        return OK
    table(
        ["#", "TIME", "KIND", "ATTEMPT", "INSTANCE", "SOURCE", "CODE", "RESULT", "SECONDS", "REASON"],
        [
            [
                r["number"],
                when(r["restart_time"]),
                r["kind"],
                "%s->%s" % (r["attempt"], r["new_attempt"]) if r.get("new_attempt") else r["attempt"],
                r.get("instance_name") or "",
                r.get("error_source") or "",
                "" if r.get("error_code") is None else r["error_code"],
                r.get("result") or "",
                "" if r.get("duration_seconds") is None else "%.1f" % r["duration_seconds"],
                r.get("reason") or "",
            ]
            for r in records
        ],
    )
    return OK


def cmd_stop(args: argparse.Namespace) -> int:
    api = connect(args)
    job = api.post("jobs/%s/stop/" % args.job)
    if args.wait:
        return wait_for(api, args.job, args)
    if args.json:
        emit_json(job)
    else:
        print("Job %s: %s%s" % (job["id"], job["status"], " -- " + job["reason"] if job.get("reason") else ""))
    return OK


def cmd_stacks(args: argparse.Namespace) -> int:
    api = connect(args)
    diagnosis = api.post("jobs/%s/diagnoses/stacks/" % args.job)
    if args.json:
        emit_json(diagnosis)
    else:
        print(diagnosis.get("summary") or "The snapshot is empty.")
    return OK


# --- the parser ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")
    common.add_argument("--url", help="the console's URL (default: from `vigil login`, or VIGIL_API_URL)")
    common.add_argument("--token", help="API token (default: from `vigil login`, or VIGIL_API_TOKEN)")
    common.add_argument("--http-timeout", type=float, default=30.0, metavar="SECONDS", help=argparse.SUPPRESS)
    waiting = argparse.ArgumentParser(add_help=False)
    waiting.add_argument(
        "--interval", type=float, default=1.0, metavar="SECONDS", help="how often to ask the console (default 1)"
    )
    waiting.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="give up (exit 8) after this long"
    )

    parser = argparse.ArgumentParser(
        prog="vigil",
        description="Run and watch jobs on a Vigil console.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version="vigil " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def command(name: str, fn: Callable[[argparse.Namespace], int], help: str, wait: bool = False):
        p = sub.add_parser(
            name,
            help=help,
            description=help,
            parents=[common] + ([waiting] if wait else []),
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(fn=fn)
        return p

    command("login", cmd_login, "store the console's URL and your API token (asked for, or --token, or stdin)")
    p = command("submit", cmd_submit, "submit a job from a YAML or JSON file (the CreateJob body)", wait=True)
    p.add_argument("file", help="the job file, or - for stdin")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a field: dotted keys, list indexes, JSON values "
        "(--set envs.LR=0.1 --set job_specs.1.pod_count=4); repeatable",
    )
    p.add_argument("--workspace", "-w", help="the workspace slug (overrides the file's)")
    p.add_argument("--wait", action="store_true", help="wait until the job ends; exit with its result")
    p = command("ls", cmd_ls, "list jobs, newest first")
    p.add_argument("--workspace", "-w", help="only this workspace (slug or id)")
    p.add_argument("--status", "-s", help="only these statuses, comma-separated (e.g. running,restarting)")
    p.add_argument("--name", "-q", help="name contains")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p = command("status", cmd_status, "a job's status and its instances", wait=True)
    p.add_argument("job", type=int)
    p.add_argument("--wait", action="store_true", help="wait until the job ends; exit 0 Succeeded, 1 Failed, 7 Stopped")
    p = command("logs", cmd_logs, "print an instance's log; -f follows it live, across restarts", wait=True)
    p.add_argument("job", type=int)
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    p.add_argument("--instance", "-i", help="e.g. worker-0 (default: the first rank's)")
    p.add_argument("--attempt", "-a", type=int, help="only this attempt (default: the current one, then the next)")
    p.set_defaults(interval=0.5)
    p = command("events", cmd_events, "the job's events (decisions, restarts, messages); -f follows", wait=True)
    p.add_argument("job", type=int)
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    p.add_argument("--type", "-t", help="only these types, comma-separated (e.g. decision,custom_message)")
    p = command("restarts", cmd_restarts, "the job's restart records: why, when, what happened")
    p.add_argument("job", type=int)
    p = command("stop", cmd_stop, "stop a job", wait=True)
    p.add_argument("job", type=int)
    p.add_argument("--wait", action="store_true", help="wait until it has stopped")
    p = command("stacks", cmd_stacks, "take a stack snapshot of every instance now and print the aggregated view")
    p.add_argument("job", type=int)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except CliError as exc:
        sys.stderr.write("vigil: %s\n" % exc.message)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `vigil logs 1 | head`: the reader left; not an error.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return OK


if __name__ == "__main__":
    sys.exit(main())
