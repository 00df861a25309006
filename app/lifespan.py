"""Application state, built at startup and handed to requests (``request.state.services``)."""

import asyncio
import functools
import gc
import logging
import ssl
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from fastapi import FastAPI

from app.budgets.service import Budgets
from app.compaction.service import CompactionService
from app.compaction.trigger import CondenseTrigger
from app.config import Settings
from app.context.group_commit import FollowUp
from app.context.reconcile import reconcile
from app.context.records import HeadState
from app.context.store import ContextStore, LockedTask
from app.db.engine import Database, open_database
from app.db.models import Job
from app.final_summaries.service import FinalSummaryService
from app.formats.costs import TokenCounting
from app.inheritance.service import InheritanceService
from app.jobs.queue import JobQueue
from app.jobs.runner import JobRunner
from app.journals.service import JournalService
from app.llm.http import HTTPBackend
from app.llm.registry import build_backends
from app.maintenance.periodic import start_periodic_checkpoint, start_periodic_cleanup
from app.maintenance.service import MaintenanceService
from app.messages.service import MessageService
from app.observability.metrics import Metrics
from app.payloads.service import PayloadService
from app.planning.service import PlanningService
from app.proxy.service import ProxyService
from app.proxy.wires import WireName
from app.stats.service import StatsService
from app.storage.layout import PLANNING, SUMMARIES, TOOLS, Layout
from app.storage.locks import TaskLocks, process_locks
from app.summaries.processes import SummaryProcesses
from app.summaries.summarizer import Summarizer
from app.tasks.creation import TaskCreation
from app.tasks.repository import counter_names
from app.tasks.service import TaskService
from app.threads.chronicle import KIND as CHRONICLE
from app.threads.chronicle import ChronicleWriter
from app.threads.service import ThreadService
from app.ui.pages import OpsPages
from app.webhooks.service import WebhookDelivery
from migrations.upgrade import upgrade_database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Services:
    settings: Settings
    db: Database
    store: ContextStore
    tasks: TaskService
    task_creation: TaskCreation
    messages: MessageService
    tools: JournalService
    planning: PlanningService
    summaries: JournalService
    compaction: CompactionService
    summary_processes: SummaryProcesses | None
    jobs: JobQueue
    runner: JobRunner
    metrics: Metrics
    payloads: PayloadService
    final_summaries: FinalSummaryService
    inheritance: InheritanceService
    threads: ThreadService
    stats: StatsService
    maintenance: MaintenanceService
    proxy: ProxyService
    ui: OpsPages


def build_services(
    settings: Settings,
    db: Database,
    layout: Layout,
    http: httpx.AsyncClient,
    locks: TaskLocks,
    counting: TokenCounting,
) -> Services:
    metrics = Metrics()
    jobs = JobQueue(db, max_attempts=settings.job.max_attempts, lease_s=settings.job.lease_s)
    budgets = Budgets(settings, counting)

    # The store calls the trigger after each commit, and the trigger compacts through a
    # service built on the store: the call resolves ``trigger``, made below, when it happens.
    async def after_commit(context: LockedTask, before: HeadState, after: HeadState) -> FollowUp:
        return await trigger.after_append(context, before, after)

    processes = settings.compaction.summarizer_processes
    summary_processes = (
        SummaryProcesses(processes, niceness=settings.compaction.summarizer_niceness)
        if processes
        else None  # the digest (and a condense's indexing and rendering) in a worker thread
    )
    store = ContextStore(
        db=db,
        layout=layout,
        locks=locks,
        counting=counting,
        settings=settings,
        on_damaged_files=metrics.damaged_files.inc,
        on_file_work=metrics.file_work_ran,
        after_commit=after_commit,
        processes=summary_processes,
    )
    backends = build_backends(settings, http, metrics)
    inheritance = InheritanceService(store, jobs, wait_s=settings.inheritance.wait_s)
    tasks = TaskService(store, budgets, jobs, settings)
    creation = TaskCreation(tasks, store, budgets, inheritance, settings, frozenset(backends))
    summarizer = Summarizer(
        backends=backends,
        # The summariser's window is the LLM's; what it costs is counted like a default task.
        counter=counting.counter(counting.counter_name(settings.llm.model)),
        prompt=settings.compaction.condense_prompt,
        backend_name=settings.compaction.condense_backend,
        max_tokens=settings.compaction.summary_max_tokens,
        processes=summary_processes,
    )
    compaction = CompactionService(
        store, budgets, summarizer, settings, metrics=metrics, processes=summary_processes
    )
    trigger = CondenseTrigger(budgets, jobs, compaction)
    final_summaries = FinalSummaryService(
        store,
        summarizer,
        jobs,
        backend=settings.final_summary.backend,
        max_tokens=settings.final_summary.max_tokens,
    )

    async def condense_job(job: Job) -> dict[str, object]:
        outcome = await compaction.relieve(job.task_uuid, thread_id=job.thread_id)
        return outcome.as_dict() | {"skipped": outcome.kind == "skipped"}

    def journal(file_name: str, *, key: str, time_field: str) -> JournalService:
        return JournalService(
            store,
            file_name=file_name,
            key=key,
            time_field=time_field,
            max_page_bytes=settings.limits.max_page_bytes,
        )

    runner = JobRunner(
        jobs,
        {
            "condense": condense_job,
            "final_summary": final_summaries.write,
            "webhook": WebhookDelivery(settings, http).deliver,
            CHRONICLE: ChronicleWriter(
                store,
                summarizer,
                jobs,
                trigger.after_append,
                max_tokens=settings.compaction.summary_max_tokens,
            ).write,
        },
        poll_s=settings.job.poll_s,
        backoff_s=settings.job.backoff_s,
        concurrency=settings.job.concurrency,
    )
    messages = MessageService(store, settings, metrics=metrics)
    payloads = PayloadService(store, budgets, compaction)
    summaries = journal(SUMMARIES, key="id", time_field="created_at")
    threads = ThreadService(store, trigger.after_append, jobs, settings)
    stats = StatsService(db, store.flush)
    wires: dict[WireName, str] = {
        "openai": settings.proxy.openai_backend,
        "anthropic": settings.proxy.anthropic_backend,
    }
    # Settings checked that each named backend exists with its wire's kind.
    relays = {
        wire: backend
        for wire, name in wires.items()
        if name and isinstance(backend := backends[name], HTTPBackend)
    }
    return Services(
        settings=settings,
        db=db,
        store=store,
        tasks=tasks,
        task_creation=creation,
        messages=messages,
        tools=journal(TOOLS, key="seq", time_field="timestamp"),
        planning=PlanningService(
            journal(PLANNING, key="id", time_field="created_at"),
            store,
            budgets,
            trigger.if_crossed,
        ),
        summaries=summaries,
        compaction=compaction,
        summary_processes=summary_processes,
        jobs=jobs,
        runner=runner,
        metrics=metrics,
        payloads=payloads,
        final_summaries=final_summaries,
        inheritance=inheritance,
        threads=threads,
        stats=stats,
        maintenance=MaintenanceService(db, tasks, settings),
        proxy=ProxyService(
            store,
            creation,
            messages,
            compaction,
            payloads,
            relays,
            settings.compaction.default_context_length,
        ),
        ui=OpsPages(
            tasks=tasks,
            store=store,
            budgets=budgets,
            messages=messages,
            summaries=summaries,
            jobs=jobs,
            threads=threads,
            stats=stats,
            final_summaries=final_summaries,
        ),
    )


async def prepare_storage(db: Database, layout: Layout, locks: TaskLocks) -> None:
    """Migrate and reconcile, once at a time across the workers sharing CONTEXT_DIR."""
    layout.ensure()
    async with locks.hold_global():
        await upgrade_database(db)
        journal = await db.journal_mode()
        if journal not in (None, "wal", "memory"):
            # Still correct, but readers and the writer then exclude each other: every read
            # waits while a write-behind round or a condense commits.
            log.warning(
                "SQLite could not keep a write-ahead log (journal mode %r): reads wait for "
                "writes; put the database on a local disk or use PostgreSQL",
                journal,
            )
        fixed = await reconcile(layout, db, locks)
        if fixed:
            log.warning("startup reconciliation fixed %d task directories", fixed)


async def warm_counters(counting: TokenCounting, db: Database, settings: Settings) -> None:
    """Load, off the event loop, the encodings that existing tasks, new tasks and the summariser
    will count with (about half a second each, once per process)."""
    async with db.reader() as session:
        names = await counter_names(session)

    def load() -> None:
        names.update(counting.counter_name(model) for model in ("", settings.llm.model))
        for name in names:
            counting.costs(name)

    await asyncio.to_thread(load)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS settings, made once per process: loading the CA bundle takes
    ~50 ms, which every start of an app (a test's, the CLI's) paid again."""
    return httpx.create_ssl_context()


@asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    """Storage migrated and reconciled, encodings warm, services built; the job runner and
    periodic work are the caller's to start (the service does, the CLI does not)."""
    layout = Layout(settings.context_dir.resolve())
    db = open_database(settings.effective_database_url)
    locks = TaskLocks(process_locks(layout, db.engine))
    try:
        await prepare_storage(db, layout, locks)
        counting = TokenCounting(settings.token_counter)
        await warm_counters(counting, db, settings)
        # One client, shared by the LLM backends and webhooks.
        async with httpx.AsyncClient(verify=tls_context()) as http:
            services = build_services(settings, db, layout, http, locks, counting)
            adopted = await services.store.adopt_unflushed()
            if adopted:
                log.warning("%d contexts held appends their database heads lacked", adopted)
            try:
                yield services
            finally:
                await services.store.close()  # the heads appends left pending
                if services.summary_processes is not None:
                    await services.summary_processes.close()
    finally:
        await locks.close()
        await db.dispose()


def _freeze_startup(settings: Settings) -> bool:
    """What startup made lives as long as the service: kept out of the collector's full
    passes, which otherwise walk every module, model and route each time (one such pass took
    83 ms on a fast host while a condense ran, every request of the process waiting). Whether
    this froze them: not if off, nor if something else froze objects first (a program that
    embeds the service and manages its own, which unfreezing would undo)."""
    if not settings.server.gc_freeze or gc.get_freeze_count():
        return False
    gc.freeze()
    return True


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Services]]:
    settings: Settings = app.state.settings
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(settings.storage.io_threads, "context-io"))
    # A process-wide setting: the interpreter's own default while the service is not up.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(settings.server.switch_interval_ms / 1000)
    try:
        # The MCP route (app/mcp_server/mount.py) is served while the services are up.
        async with open_services(settings) as services, app.state.mcp.running():
            await services.runner.start()
            cleanup = start_periodic_cleanup(services.maintenance, settings)
            checkpoint = start_periodic_checkpoint(services.db, settings)
            log.info("context service ready: %s", services.store.layout.root)
            froze = _freeze_startup(settings)
            try:
                yield {"services": services}
            finally:
                if froze:
                    gc.unfreeze()
                for periodic in (cleanup, checkpoint):
                    if periodic is not None:
                        await periodic.stop()
                await services.runner.stop()
    finally:
        sys.setswitchinterval(switch_interval)
