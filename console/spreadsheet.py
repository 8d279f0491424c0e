"""CSV exports that a spreadsheet opens as data: a cell that would start a formula is quoted as text
(OWASP, "CSV Injection": cells beginning with =, +, -, @, tab or carriage return)."""

import csv
import io
from collections.abc import Iterable, Sequence

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> object:
    """``value`` as it is, or prefixed with ``'`` when it is text a spreadsheet would run as a formula.
    Numbers stay numbers (a negative number is data, not a formula)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """The CSV document (RFC 4180 quoting, CRLF line ends) of ``header`` and ``rows``, each cell made safe."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows([safe_cell(v) for v in row] for row in rows)
    return out.getvalue()
