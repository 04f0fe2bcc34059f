"""MkDocs hook: the pages that are generated from the code, and links into the repository.

- `<!-- trajlake:schema -->` in a page becomes every table of the lake, generated from
  `store/schema.py` (its `TableSpec`s for keys and partitioning, its source comments for
  what each column means), so the page cannot drift from the schema writers validate against.
- `<!-- trajlake:changelog -->` becomes `CHANGELOG.md` (history lives at the root, beside the
  README).
- `<!-- trajlake:configuration -->` becomes every `trajlake.toml` key, generated from the
  settings declarations (the sections of `flows.config.root.Settings`, the same ones
  `trajlake config` and the command-line options are made from), one table per TOML table.
- A link from a page to a file of the repository outside `docs/` (`../tests/x.py`, as it
  reads on GitHub too) becomes a link to a generated page showing that file. A link whose
  file does not exist, or whose `#name` is not a `def`/`class` in it, is an error, so a
  guarantee cannot keep pointing at a test that was renamed or removed.

The hook imports this checkout (its folder goes first on `sys.path`), not whatever
trajlake happens to be installed.
"""

from __future__ import annotations

import logging
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from flows.config.keys import describe
from flows.config.naming import section_fields
from flows.config.options import options_of
from flows.config.trainers import TRAINERS
from store import schema, vocabulary

log = logging.getLogger("mkdocs.hooks.trajlake")

SOURCE_DIR = "source"  # where the generated pages of repository files go in the site
MARKER = re.compile(r"^<!--\s*trajlake:([a-z_]+)\s*-->$", re.M)  # alone on its line
# a Markdown link target leaving docs/: `](../tests/x.py)` or `](../tests/x.py#test_name)`
REPO_LINK = re.compile(r"\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")
LANGUAGES = {".py": "python", ".toml": "toml", ".sh": "bash", ".json": "json", ".sql": "sql", "": "bash"}


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def _docs_dir(config: MkDocsConfig) -> Path:
    return Path(config.docs_dir).resolve()


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    root = str(_root(config))
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


# --- links into the repository ---------------------------------------------------------------------


def _repo_targets(page_src: str, markdown: str, config: MkDocsConfig) -> list[tuple[str, str, str]]:
    """(link as written, repository path, fragment) of every link in a page that leaves docs/."""
    found = []
    docs, root = _docs_dir(config), _root(config)
    for match in REPO_LINK.finditer(markdown):
        written, fragment = match.group(1), (match.group(2) or "").lstrip("#")
        target = (docs / posixpath.dirname(page_src) / written).resolve()
        if target.is_relative_to(docs):
            continue  # a page of the site: MkDocs checks it
        found.append(
            (written, target.relative_to(root).as_posix() if target.is_relative_to(root) else "", fragment)
        )
    return found


def _check_target(page_src: str, written: str, path: str, fragment: str, config: MkDocsConfig) -> bool:
    root = _root(config)
    if not path or not (root / path).is_file():
        log.warning("%s links to %s, which is not a file of the repository", page_src, written)
        return False
    if fragment:
        text = (root / path).read_text(encoding="utf-8")
        if not re.search(rf"^\s*(async\s+def|def|class)\s+{re.escape(fragment)}\b", text, re.M):
            log.warning(
                "%s links to %s#%s, but %s has no def or class %s",
                page_src,
                written,
                fragment,
                path,
                fragment,
            )
    return True


def _source_page(path: str, text: str) -> str:
    if path.endswith(".md"):
        return text
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    language = LANGUAGES.get(Path(path).suffix, "text")
    return f"# `{path}`\n\n{fence}{language}\n{text}\n{fence}\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """A generated page for every repository file a page links to."""
    root, wanted = _root(config), set()
    for file in files.documentation_pages():
        if not file.abs_src_path:
            continue  # a page another plugin generated: it has no file to read here
        for _, path, _ in _repo_targets(
            file.src_uri, Path(file.abs_src_path).read_text(encoding="utf-8"), config
        ):
            if path and (root / path).is_file():
                wanted.add(path)
    for path in sorted(wanted):
        content = _source_page(path, (root / path).read_text(encoding="utf-8"))
        files.append(File.generated(config, f"{SOURCE_DIR}/{path}.md", content=content))
    return files


def _rewrite_links(markdown: str, page: Page, config: MkDocsConfig) -> str:
    def replace(match: re.Match[str]) -> str:
        [(written, path, fragment)] = _repo_targets(page.file.src_uri, match.group(0), config) or [
            ("", "", "")
        ]
        if not written:
            return match.group(0)
        if not _check_target(page.file.src_uri, written, path, fragment, config):
            return match.group(0)
        here = posixpath.dirname(page.file.src_uri)
        return f"]({posixpath.relpath(f'{SOURCE_DIR}/{path}.md', here or '.')})"

    return REPO_LINK.sub(replace, markdown)


# --- generated reference -----------------------------------------------------------------------------


def _schema_comments(source: str) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """From `store/schema.py`'s text: the comment above each table's declaration, and each
    (declaration, column)'s comment (the lines above the field and the one after it)."""
    blocks: dict[str, str] = {}
    columns: dict[tuple[str, str], str] = {}
    above: list[str] = []
    current: str | None = None
    for line in source.splitlines():
        stripped = line.strip()
        start = re.match(r"^([A-Z_]+) = (TableSpec|pa\.struct)\(", line)
        field = re.match(r'pa\.field\("([^"]+)"', stripped)
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
            continue
        if start:
            current = start.group(1)
            blocks[current] = " ".join(above)
        elif line.startswith(")"):
            current = None
        elif current and field:
            trailing = line.split("  #", 1)[1].strip() if "  #" in line else ""
            columns[(current, field.group(1))] = " ".join([*above, trailing]).strip()
        above = []
    return blocks, columns


def _type_name(tp: Any, named: dict[Any, str]) -> str:
    import pyarrow as pa

    for struct, name in named.items():
        if tp.equals(struct):
            return f"[{name}](#{name})"
    if pa.types.is_list(tp):
        return f"list of {_type_name(tp.value_type, named)}"
    if pa.types.is_timestamp(tp):
        return f"timestamp ({tp.unit}, {tp.tz or 'naive'})"
    return str(tp)


def _vocabulary(text: str) -> str:
    """A comment naming `store.vocabulary.X` with X's values spelled out."""
    from typing import get_args

    def spell(match: re.Match[str]) -> str:
        values = get_args(getattr(vocabulary, match.group(1), None))
        return "one of " + ", ".join(f"`{v}`" for v in values) if values else match.group(0)

    return re.sub(r"store\.vocabulary\.(\w+)", spell, text)


def _escape(text: str) -> str:
    """Text for a table cell: pipes escaped, and `<`/`>` outside code spans kept as text (a help's
    `<lake>/_spool` is not an HTML tag)."""
    parts = text.replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def schema_reference(config: MkDocsConfig) -> str:
    source = (_root(config) / "store" / "schema.py").read_text(encoding="utf-8")
    blocks, comments = _schema_comments(source)
    declared = {name: value for name, value in vars(schema).items() if isinstance(value, schema.TableSpec)}
    named = {schema.MESSAGE: "message", schema.TOOL_CALL: "tool_call", schema.TURN: "turn"}
    out = []
    for table in schema.TABLES.values():
        var = next(name for name, spec in declared.items() if spec is table)
        out.append(f"### `{table.name}`\n")
        if blocks.get(var):
            out.append(f"{blocks[var]}\n")
        facts = [f"key `({', '.join(table.key)})`"]
        facts.append(
            "a repeated key replaces its row" if table.upsert else "a repeated key keeps the first row"
        )
        if table.partitioned:
            facts.append(
                f"partitioned by `{schema.PARTITION_COLUMN}`, the UTC date of `{table.partition_from}`"
            )
        required = [c for c in table.required if c not in table.key]
        if required:
            facts.append("never null: " + ", ".join(f"`{c}`" for c in required))
        out.append("; ".join(facts) + ".\n")
        out.append("| column | type | meaning |\n| --- | --- | --- |")
        for field in table.schema:
            if field.name == schema.WRITTEN_AT:
                meaning = "when the write that holds this row was committed (the newest wins a key)"
            elif field.name == schema.PARTITION_COLUMN:
                meaning = f"the partition: UTC date of `{table.partition_from}`"
            else:
                meaning = _vocabulary(comments.get((var, field.name), ""))
            out.append(f"| `{field.name}` | {_type_name(field.type, named)} | {_escape(meaning)} |")
        out.append("")
    out.append("### Nested types\n")
    for struct, name in named.items():
        var = next(k for k, v in vars(schema).items() if v is struct)
        out.append(f"#### `{name}`\n")
        out.append("| field | type | meaning |\n| --- | --- | --- |")
        for field in struct:
            meaning = comments.get((var, field.name), "")
            out.append(f"| `{field.name}` | {_type_name(field.type, named)} | {_escape(meaning)} |")
        out.append("")
    return "\n".join(out)


def configuration_reference(config: MkDocsConfig) -> str:
    """One table per TOML table of `flows.config.Settings`, read from the sections' declarations
    (TRL's fields from TRL), as `trajlake config` lists them."""
    from flows.config.root import Settings

    declared = {key: tp for key, _, tp in section_fields(Settings)}
    flags: dict[str, str] = {}  # TOML key -> the option that sets it, on the commands that read its table
    for section in [*Settings.model_fields, *(f"train.{t}" for t in TRAINERS)]:
        if section == "train":
            continue
        key, options = options_of(section)
        flags.update({f"{key}.{o.key}": o.flag.split()[0] for o in options if not o.env})
    tables: dict[str, list[Any]] = {}
    for key in describe(trl=True):  # a sub-table's keys come amid its table's: one heading each
        tables.setdefault(key.key.rsplit(".", 1)[0], []).append(key)
    out: list[str] = []
    for table, keys in tables.items():
        cls = declared.get(table) or Settings.model_fields[table.split(".")[0]].annotation
        doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ") if cls else ""
        generic = cls is not None and doc.startswith(f"{cls.__name__}(")  # a dataclass's signature
        target = f"{cls.__module__}:{cls.__qualname__}" if cls is not None else "TRL"
        if table.startswith("train."):  # TRL's config: the few fields set in the file
            module, name, _ = TRAINERS[table.removeprefix("train.")]
            target, doc = f"{module}:{name}", "TRL's trainer config; the fields set in trajlake.toml."
        out.append(f"\n### `[{table}]`\n")
        out.append(f"Declared by `{target}`." + ("" if generic or not doc else f" {_escape(doc)}") + "\n")
        out.append("| key | default | environment | option | meaning |\n| --- | --- | --- | --- | --- |")
        for key in keys:
            name, default = key.key.rsplit(".", 1)[1], key.default
            cell = _escape(repr(default))
            cell = (
                f"`{cell}`"
                if len(cell) <= 60
                else f"<details><summary>{len(default)} entries</summary>`{cell}`</details>"
            )
            option = f"`{flags[key.key]}`" if key.key in flags else ""
            out.append(f"| `{name}` | {cell} | `${key.variable}` | {option} | {_escape(key.help)} |")
    return "\n".join(out) + "\n"


def changelog(config: MkDocsConfig) -> str:
    """`CHANGELOG.md` of the repository root, as the changelog page."""
    return (_root(config) / "CHANGELOG.md").read_text(encoding="utf-8")


GENERATORS = {"schema": schema_reference, "configuration": configuration_reference, "changelog": changelog}


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri.startswith(f"{SOURCE_DIR}/"):
        return markdown  # a repository file shown as it is

    def generate(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            log.warning(
                "%s asks for `trajlake:%s`; known: %s", page.file.src_uri, name, ", ".join(GENERATORS)
            )
            return match.group(0)
        return GENERATORS[name](config)

    return _rewrite_links(MARKER.sub(generate, markdown), page, config)
