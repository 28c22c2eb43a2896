"""How sure a failure's verdict is, in words for the job page and restart records (issue 13).

Pure: from what a restart record or a job_failed event keeps (error source, family,
evidence line, error code), never from the database.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Verdict", "describe", "exit_status_text"]


@dataclass(frozen=True)
class Verdict:
    basis: str  # one sentence: what decided
    family: str  # the failure family of the signature ("" when none)
    evidence: str  # the line that decided ("" when only the exit status did)
    by_exit_status: bool

    @property
    def offer_keyword(self) -> str:
        """The line an admin may make a retryable keyword ("" when there is none to offer)."""
        return self.evidence


def exit_status_text(error_code: str) -> str:
    if error_code.startswith("EXIT_CODE_"):
        return f"exit code {error_code.removeprefix('EXIT_CODE_')}"
    if error_code.startswith("SIG"):
        return f"signal {error_code}"
    if error_code == "EXIT_UNKNOWN":
        return "a missing exit status"
    return "its exit status"


def describe(error_source: str, family: str, evidence: str, error_code: str) -> Verdict:
    source = (error_source or "").strip()
    family, evidence, error_code = family or "", evidence or "", error_code or ""
    if source == "ExitCode":
        return Verdict(f"No known signature; decided by {exit_status_text(error_code)}.", family, "", True)
    if source == "Backend":
        return Verdict(
            f"Decided by the scheduler's reason {evidence or error_code}" + (f" ({family} family)." if family else "."),
            family,
            "",
            False,
        )
    if source == "UserKeyword":
        return Verdict(
            "Decided by a retryable keyword of this job or workspace, on the line below.", family, evidence, False
        )
    if source == "Log":
        return Verdict(
            f"Decided by a known {family + ' ' if family else ''}signature on the line below.", family, evidence, False
        )
    return Verdict("Decided by the monitor's own detection (hang, exit hang or C4D).", family, "", False)
