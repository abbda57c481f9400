"""How every stage reads its settings: arguments, then environment, then a TOML file, then defaults.

Each stage declares a frozen pydantic-settings model with the prefix `CDCPIPE_` and a TOML section of its
own (`[stack]`, `[relay]`, ...). The file is `$CDCPIPE_CONFIG`, else `cdcpipe.toml` in the working
directory when there is one.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from ground.errors import ConfigError

CONFIG_VARIABLE = "CDCPIPE_CONFIG"
ENV_PREFIX = "CDCPIPE_"
# The local stack's database as its superuser (password from PGPASSFILE): the stages' default Postgres.
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/cdcpipe"
# Sections renamed since a release: a file that still has the old name is refused with the new one.
RENAMED_SECTIONS = {"spark": "jobs"}


def config_file() -> Path | None:
    """The settings file in force, if any."""
    named = os.environ.get(CONFIG_VARIABLE)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(f"{CONFIG_VARIABLE}={named}: no such file; point it at a TOML file or unset it")
        return path
    local = Path("cdcpipe.toml")
    return local if local.is_file() else None


class _TomlSection(PydanticBaseSettingsSource):
    """One section of the settings file, as a settings source."""

    def __init__(self, settings_cls: type[BaseSettings], section: str) -> None:
        super().__init__(settings_cls)
        self._values: dict[str, Any] = {}
        path = config_file()
        if path is None:
            return
        try:
            with path.open("rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc}); fix the file or unset {CONFIG_VARIABLE}") from exc
        for old, new in RENAMED_SECTIONS.items():
            if old in data:
                raise ConfigError(f"{path}: the [{old}] section is now [{new}]; rename it (its keys are unchanged)")
        section_data = data.get(section, {})
        if not isinstance(section_data, dict):
            raise ConfigError(f"{path}: [{section}] must be a table of settings")
        self._values = section_data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


class StageSettings(BaseSettings):
    """Base of every stage's settings: frozen, `CDCPIPE_`-prefixed, unknown keys rejected."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")
    toml_section: ClassVar[str] = ""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls.toml_section:
            sources.append(_TomlSection(settings_cls, cls.toml_section))
        return tuple(sources)

    @classmethod
    def load(cls, **overrides: Any) -> Self:
        """Read and validate once; a bad value becomes a ConfigError naming the variable to fix."""
        try:
            return cls(**overrides)
        except SettingsError as exc:
            raise ConfigError(f"invalid settings: {exc}; check the CDCPIPE_* variables and the settings file") from exc
        except ValidationError as exc:
            raise ConfigError("invalid settings: " + "; ".join(cls._problem(err) for err in exc.errors())) from exc

    @classmethod
    def _problem(cls, err: ErrorDetails) -> str:
        """One validation error as a sentence: the setting, its value unless it may hold a secret, the fix.

        A value is shown only when it is a plain value of a declared setting that is not a secret: an error of the
        whole model carries every setting as its input, and an undeclared key may be a misspelt secret.
        """
        message = err["msg"].removeprefix("Value error, ")
        path = [str(part) for part in err["loc"]]
        if not path:
            return f"{message} (in the CDCPIPE_* variables or [{cls.toml_section}] of the settings file)"
        field = ".".join(path)
        value = err.get("input")
        plain = isinstance(value, (str, int, float, bool, Path)) and _declared_not_secret(cls, path)
        shown = f"={value!r}" if plain else ""
        return (
            f"{field}{shown}: {message} "
            f"(set {ENV_PREFIX}{path[-1].upper()} or [{cls.toml_section}] {path[-1]} in the settings file)"
        )

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """(environment variable, default, description) for each field: what `--help` shows."""
        rows = []
        for name, field in cls.model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, StageSettings):
                continue  # a shared section (`kafka`): described once, under its own name
            value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
            # A connection string's default says where and as whom (never a password: a default has none to show).
            is_dsn = name.endswith("_dsn") and isinstance(value, SecretStr)
            default = dsn_shown(value.get_secret_value()) if is_dsn else _shown(value)
            rows.append((f"{ENV_PREFIX}{name.upper()}", default, field.description or ""))
        return rows


def _declared_not_secret(model: type[BaseModel], path: list[str]) -> bool:
    """Whether `path` names a declared setting, through nested models, none of them a secret along the way."""
    for part in path:
        field = model.model_fields.get(part)
        if field is None or "SecretStr" in str(field.annotation):
            return False
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return True


def _shown(value: object) -> str:
    """A default as a user would type it: a list of folders colon-separated, of names comma-separated."""
    if value is None:
        return ""
    if isinstance(value, (tuple, list, set, frozenset)):
        separator = ":" if value and all(isinstance(v, Path) for v in value) else ","
        return separator.join(sorted(str(v) for v in value) if isinstance(value, (set, frozenset)) else map(str, value))
    return str(value)


def revealed(value: SecretStr | None) -> str | None:
    """An optional secret setting's value, at the one place it is used (a connection, a child's environment)."""
    return value.get_secret_value() if value is not None else None


def dsn_shown(dsn: str) -> str:
    """A libpq connection string as it may be printed: `postgresql://user@host:port/dbname`, nothing else of it.

    A URL's `user:password@` and a keyword string's `password=` are secrets; so may other keywords be (a
    `sslkey` path, `options`): only the four parts that say where and as whom are ever shown.
    """
    from psycopg.conninfo import conninfo_to_dict  # psycopg: a fifth of a command's start, and few print a DSN

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # not a connection string libpq reads: nothing of it is shown
        return "(a connection string libpq cannot read)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    return (
        f"postgresql://{user}{parts.get('host') or 'localhost'}:{parts.get('port') or 5432}/{parts.get('dbname') or ''}"
    )


def split_list(value: object, separator: str = ",") -> object:
    """A list setting given as one string (an environment variable): split it; anything else as it is."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(separator) if part.strip()]
    return value
