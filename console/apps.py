from django.apps import AppConfig
from django.db.backends.signals import connection_created

from .datadir import secure_sqlite


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Vigil console"

    def ready(self):
        from . import checks  # noqa: F401  (registers the system checks)

        connection_created.connect(_secure_sqlite, dispatch_uid="vigil-secure-sqlite")


def _secure_sqlite(sender, connection, **kwargs):
    """SQLite creates the database file with the umask's mode: make it the console's alone."""
    if connection.vendor == "sqlite":
        name = str(connection.settings_dict.get("NAME") or "")
        if name and name != ":memory:" and not name.startswith("file:"):
            secure_sqlite(name)
