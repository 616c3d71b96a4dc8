"""How many iterations each ``lax.while_loop`` of a program ran, from a sampled call run again with counters.

A while loop whose stop depends on data (a solver converging) has no trip count in its HLO, and XLA:CPU runs the
whole loop as one thunk: a trace does not show its iterations. So the probe keeps the arguments of the first call
of each such program in a cell, and after the cell (outside its time) runs the program's jaxpr again through
:func:`counting`, an interpreter that carries one counter per ``while`` through every loop (nested loops add up
over their enclosing loops' iterations, as the forecast reads them), jitted on the CPU. Each count is keyed by
the source line of its ``while``, as the program's HLO names its loops. Used by ``_nbscope_program`` only after
the notebook imported jax; imports nothing at import time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

# Primitives that call a jaxpr once (inlined here when a while is inside).
_CALLS = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "remat", "checkpoint")


def _inner(value: object) -> Any:
    inner = getattr(value, "jaxpr", None)
    inner = getattr(inner, "jaxpr", inner)  # ClosedJaxpr -> Jaxpr
    return inner if hasattr(inner, "eqns") else None


def _whiles(jaxpr: object, found: dict[int, tuple[int, Any]], depth: int = 0) -> dict[int, tuple[int, Any]]:
    """Every ``while`` equation in ``jaxpr`` and the jaxprs nested in it, by id: (its counter's index, it)."""
    for equation in getattr(jaxpr, "eqns", ()):
        if equation.primitive.name == "while":
            found[id(equation)] = (len(found), equation)
        if depth < 8:
            for value in equation.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    if (inner := _inner(item)) is not None:
                        _whiles(inner, found, depth + 1)
    return found


def has_while(closed: object) -> bool:
    """Whether a program's jaxpr has a ``while`` (a loop whose trip count its HLO may not know) and no effect (a
    callback or a print would run again)."""
    return not getattr(closed, "effects", None) and bool(_whiles(getattr(closed, "jaxpr", None), {}))


Values = Sequence[object]
Run = Callable[[Values, Any], tuple[list[Any], Any]]  # a jaxpr's outputs and the counters, from its inputs and them


class _Counting:
    """The interpreter: each equation bound as the program ran it, but for the whiles (and what holds one), which
    carry the counters; ``sites`` numbers every while."""

    def __init__(self, closed: object) -> None:
        self.lax = sys.modules["jax"].lax
        self.sites = _whiles(getattr(closed, "jaxpr", None), {})
        self.nested: dict[int, bool] = {}

    def has_while(self, jaxpr: object) -> bool:
        if id(jaxpr) not in self.nested:
            self.nested[id(jaxpr)] = bool(_whiles(jaxpr, {}))
        return self.nested[id(jaxpr)]

    def closed(self, closed: object, leading: Values = ()) -> Run:
        """``closed`` (a ClosedJaxpr) as a function of its inputs after ``leading`` and the counters."""
        return lambda values, counts: self.run(
            _inner(closed), getattr(closed, "consts", ()), [*leading, *values], counts
        )

    def run(self, jaxpr: Any, consts: Values, args: Values, counts: object) -> tuple[list[Any], Any]:
        from jax._src.core import Literal

        lax = self.lax
        env: dict[object, object] = {**dict(zip(jaxpr.constvars, consts, strict=True))}
        env.update(zip(jaxpr.invars, args, strict=True))
        for eqn in jaxpr.eqns:
            ins = [v.val if isinstance(v, Literal) else env[v] for v in eqn.invars]
            name, params = eqn.primitive.name, eqn.params
            inner = next((params[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in params), None)
            if name == "while":
                n_cond, n_body = params["cond_nconsts"], params["body_nconsts"]
                cond = self.closed(params["cond_jaxpr"], ins[:n_cond])
                body = self.closed(params["body_jaxpr"], ins[n_cond : n_cond + n_body])
                site = self.sites[id(eqn)][0]

                def step(state: tuple[Values, Any], body: Run = body, site: int = site) -> tuple[list[Any], Any]:
                    out, seen = body(*state)
                    return out, seen.at[site].add(1)

                outs, counts = lax.while_loop(
                    lambda state, cond=cond: cond(*state)[0][0], step, (ins[n_cond + n_body :], counts)
                )
            elif name == "cond" and any(self.has_while(_inner(b)) for b in params["branches"]):
                outs, counts = lax.switch(ins[0], [self.closed(b) for b in params["branches"]], ins[1:], counts)
            elif name == "scan" and self.has_while(_inner(params["jaxpr"])):
                n_consts, n_carry = params["num_consts"], params["num_carry"]
                each = self.closed(params["jaxpr"], ins[:n_consts])

                def scanned(state: tuple[Values, Any], x: Values, each: Run = each, k: int = n_carry) -> Any:
                    out, seen = each([*state[0], *x], state[1])
                    return (out[:k], seen), out[k:]

                carry = ins[n_consts : n_consts + n_carry]
                (carry, counts), ys = lax.scan(
                    scanned,
                    (carry, counts),
                    ins[n_consts + n_carry :],
                    length=params["length"],
                    reverse=params["reverse"],
                )
                outs = [*carry, *ys]
            elif name in _CALLS and inner is not None and self.has_while(_inner(inner) or inner):
                outs, counts = self.run(_inner(inner) or inner, getattr(inner, "consts", ()), ins, counts)
            else:  # no while inside: as the program ran it
                outs = eqn.primitive.bind(*ins, **params)
                outs = outs if eqn.primitive.multiple_results else [outs]
            env.update(zip(eqn.outvars, outs, strict=True))
        return [v.val if isinstance(v, Literal) else env[v] for v in jaxpr.outvars], counts


def counting(closed: object) -> tuple[Callable[..., Any], list[tuple[str | None, int | None]]]:
    """A function of the program's flat arguments giving each while's iterations (an int32 vector), and each
    while's (file, line) in the notebook, in the vector's order."""
    from jax._src import source_info_util

    interpreter = _Counting(closed)
    zeros = sys.modules["jax"].numpy.zeros(len(interpreter.sites), "int32")
    run = interpreter.closed(closed)
    where: list[tuple[str | None, int | None]] = []
    for _, eqn in sorted(interpreter.sites.values(), key=lambda site: site[0]):
        frame = source_info_util.user_frame(getattr(eqn.source_info, "traceback", None))
        where.append((frame.file_name, frame.start_line) if frame is not None else (None, None))
    return (lambda *args: run(args, zeros)[1]), where
