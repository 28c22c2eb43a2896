"""The console's scripts are ES modules loaded without a build step: after
collectstatic, served as production serves them (DEBUG off, WhiteNoise reading
STATIC_ROOT, no finders), every relative import of every module must answer
with a JavaScript type, or the browser drops the whole page's script."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from django.core.management import call_command
from django.templatetags.static import static
from django.test import Client

IMPORT = re.compile(r"""(?:^|;|\s)(?:import|export)\s[^'"]*?\bfrom\s*["']([^"']+)["']""", re.M)


def module_imports(source: str) -> list[str]:
    return IMPORT.findall(source)


def test_the_import_pattern_reads_named_and_re_exports():
    src = 'import { a } from "./a.js";\nexport { b } from \'../b.js\';\nconst s = "from x";'
    assert module_imports(src) == ["./a.js", "../b.js"]


def test_collected_modules_resolve_their_imports_when_served_without_finders(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path
    settings.DEBUG = False
    settings.WHITENOISE_USE_FINDERS = False
    settings.WHITENOISE_AUTOREFRESH = False
    call_command("collectstatic", interactive=False, verbosity=0)
    assert (tmp_path / "vendor" / "ansi_up" / "LICENSE").is_file()  # the licence ships with the file

    client = Client()  # a new handler: WhiteNoise indexes the collected files now
    # Followed as the browser follows them: each import resolved against the URL served.
    seen: set[str] = set()
    todo = [static("js/main.js")]
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        response = client.get(url)
        assert response.status_code == 200, url
        assert response["Content-Type"].startswith("text/javascript"), (url, response["Content-Type"])
        source = b"".join(response.streaming_content).decode()
        for target in module_imports(source):
            assert target.startswith("."), f"{url} imports {target!r}: only relative imports work without a build"
            todo.append(posixpath.normpath(posixpath.join(posixpath.dirname(url), target)))
    # every module under static/js is reached from main.js (none left unloaded)
    modules = {static(f"js/{p.name}") for p in (Path(settings.BASE_DIR) / "static" / "js").glob("*.js")}
    assert modules <= seen, modules - seen
    assert static("vendor/ansi_up/ansi_up.js") in seen
