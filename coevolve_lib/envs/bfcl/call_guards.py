"""Guards around one backend call: argument limits checked before it runs, numeric precision restored after it.

BFCL's MathAPI (its own code, run as is) spends seconds to minutes on extreme literal arguments, in BFCL's
executor too: `power(base=10, exponent=10000000)` builds a ten-million-digit integer, `square_root` and `logarithm`
compute to `precision` digits, `round_number(5, -10**18)` builds 10**(10**18). `refusal` names such calls before
they run; the env answers them with an error observation, as BFCL would answer an error (and as it does answer an
integer result too long to print). The limits sit at `MAX_DIGITS`, Python's int-to-str limit, far above any BFCL
task (precisions and exponents there are single digits) and cheap to compute (~0.05 s at the limit).

`square_root` sets the process-wide `decimal` precision and `logarithm` sets `mpmath.mp.dps`; in BFCL those leak into
every later call. `restored_precision` undoes both after each call, so no call changes another.
"""

from __future__ import annotations

import contextlib
import decimal
import inspect
import math

import mpmath

MAX_DIGITS = 4300
"""Most digits a guarded call may compute: precision of `square_root`/`logarithm`, digits of an integer `power`,
places of `round_number` on an integer (the same bound as `safe_calls.MAX_INT_DIGITS`)."""


def refusal(name: str, method, args: tuple, kwargs: dict) -> str | None:
    """Why the call `name(*args, **kwargs)` of bound `method` must not run, or None. Only MathAPI functions."""
    if name not in ("power", "square_root", "logarithm", "round_number"):
        return None
    try:
        arguments = inspect.signature(method).bind(*args, **kwargs).arguments
    except TypeError:
        return None  # the call itself raises and reports the bad arguments
    if name in ("square_root", "logarithm"):
        precision = arguments.get("precision")
        if name == "logarithm" and isinstance(precision, str):
            # `mpmath.mp.dps = precision` takes int(precision): '1000000' is a million digits too. (`decimal`'s
            # precision, in square_root, takes integers only.)
            with contextlib.suppress(ValueError):  # not an integer string: the call itself fails at once
                precision = int(precision)
        if _is_number(precision) and abs(precision) > MAX_DIGITS:
            return f"precision {precision} is over the limit of {MAX_DIGITS} digits"
    elif name == "power":
        base, exponent = arguments.get("base"), arguments.get("exponent")
        # Only int ** positive int is exact and unbounded; any float operand overflows or rounds at once.
        if _is_int(base) and _is_int(exponent) and exponent > 0 and abs(base) > 1:
            if exponent * math.log10(abs(base)) > MAX_DIGITS:
                return f"the result of {name} would be over the limit of {MAX_DIGITS} digits"
    else:
        number, places = arguments.get("number"), arguments.get("decimal_places", 0)
        if _is_int(number) and _is_int(places) and places < -MAX_DIGITS:  # round(int, -n) computes 10**n
            return f"decimal_places {places} is over the limit of {MAX_DIGITS} digits"
    return None


@contextlib.contextmanager
def restored_precision():
    """Run the block with this thread's `decimal` context and mpmath's precision put back afterwards."""
    mpmath_prec = mpmath.mp.prec
    try:
        with decimal.localcontext():
            yield
    finally:
        mpmath.mp.prec = mpmath_prec


def _is_int(value) -> bool:
    return type(value) in (int, bool)


def _is_number(value) -> bool:
    return type(value) in (int, bool, float)
