"""Report: reads run directories and writes the paper's tables and figures (Markdown, HTML, PNG, JSON)."""

from windtunnel.report.build import build_report
from windtunnel.report.collect import RunRecord, find_runs, read_run

__all__ = ["RunRecord", "build_report", "find_runs", "read_run"]
