"""Process settings, read from the environment (CODEVOLVE_*) by composition roots only."""

from __future__ import annotations

from pydantic import Field, PrivateAttr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url

from codevolve.core.errors import ConfigError

DEFAULT_DB_URL = "sqlite+aiosqlite:///codevolve.sqlite"  # a file in the working directory
DB_HELP = (
    "database: an SQLite file or a postgresql://USER@HOST/DB URL "
    "(default: $CODEVOLVE_DB, else ./codevolve.sqlite)"
)
READ_CACHE_S = 1.0  # seconds an API process keeps a read answer (services/api/read_cache.py)
SUPPORTED_DB_FORMS = "a file path (x.sqlite), sqlite:///PATH or postgresql://USER@HOST/DB"
_ASYNC_SCHEMES = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CODEVOLVE_", extra="ignore")

    db: str = Field(DEFAULT_DB_URL, description="database URL (SQLite file or Postgres)")
    log_level: str = Field("WARNING", description="logging level of the process")
    database_url: str | None = Field(None, description="alias of db, used when db is not set")
    redis_url: str | None = Field(None, description="Redis URL (distributed mode); unset: embedded")
    admin_token: str | None = Field(None, description="bearer token that may create user tokens")
    public_dashboard: bool = Field(False, description="dashboard readable without a token")
    metrics_token: str | None = Field(None, description="bearer token that may read /metrics")
    public_metrics: bool = Field(False, description="/metrics readable without a token")
    trust_proxy_headers: bool = Field(
        False, description="honour X-Forwarded-Proto (a proxy that sets it terminates TLS)"
    )
    max_running_jobs: int = Field(
        20, ge=1, description="serve: jobs run at once; more wait queued (sizes the pool)"
    )
    api_pool_size: int = Field(10, ge=1, description="the API's database connections")
    api_pool_timeout_s: float = Field(
        5.0, gt=0, description="seconds a request waits for a connection before a 503"
    )
    api_read_cache_s: float = Field(
        READ_CACHE_S,
        ge=0,
        allow_inf_nan=False,
        description="seconds the API keeps a read answer (job list, job, programs, workers) for "
        "later requests; writes through the same process clear it; 0: off",
    )

    # Where ``db`` came from, as an error names it: the environment variable that set it, else
    # ``--db`` (whose default it is).
    _db_option: str = PrivateAttr("--db")

    @property
    def db_option(self) -> str:
        return self._db_option

    @model_validator(mode="after")
    def _database_alias(self) -> Settings:
        if "db" in self.model_fields_set:
            self._db_option = "CODEVOLVE_DB"
        elif self.database_url:
            self.db = self.database_url
            self._db_option = "CODEVOLVE_DATABASE_URL"
        return self


def normalise_db_url(url: str, *, option: str = "--db") -> str:
    """Accept the short forms users type and return a SQLAlchemy async URL.

    ``file.db`` or ``sqlite:///file.db`` -> aiosqlite; ``postgresql://`` -> asyncpg. Any other
    scheme raises ConfigError listing the supported forms, naming ``option`` (``--db``, or the
    environment variable the URL came from).
    """
    if "://" not in url:
        if not url:
            raise ConfigError(f"{option} is empty; pass {SUPPORTED_DB_FORMS}")
        return f"sqlite+aiosqlite:///{url}"
    scheme, rest = url.split("://", 1)
    driver = _ASYNC_SCHEMES.get(scheme)
    if driver is None:
        shown = make_url(url).render_as_string(hide_password=True)
        named = f"{option} {shown}" if option.startswith("--") else f"{option}={shown}"
        raise ConfigError(
            f"{named}: {scheme}:// databases are not supported; pass {SUPPORTED_DB_FORMS}"
        )
    return f"{driver}://{rest}"
