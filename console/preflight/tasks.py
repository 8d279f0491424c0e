"""Celery entry point of pre-flight: the worker runs the checks where engines are launched from."""

from celery import shared_task

from console.preflight.worker_report import RUN_PREFLIGHT, keep, report_here


@shared_task(name=RUN_PREFLIGHT, ignore_result=True)
def run_preflight(run_id: str) -> None:
    """Run every check in this process and leave the report in the cache under ``run_id``."""
    keep(run_id, report_here())
