"""What a federated retrain sent, counted and accounted: the message counts a saved model or an assess
file records (``communication``, docs/assess-contract.md), their check, the PROTOCOL §3 and §5
formulas they must match, and the validation and model-selection traffic a deployment would add.
Numbers only: the report renders the rows (esnfed_stages/report/tables.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from esnfed_core.method import METHODS, Method
from esnfed_core.methods import Sends, Traffic
from esnfed_core.quote import quote
from esnfed_core.sampling import CLIENT_FRACTION, FULL, sample_size
from esnfed_core.validation import ParameterError
from esnfed_core.validation_traffic import (
    ValidationPlan, analytic_lambda_selection, analytic_validation, lambda_selection_formula,
    lambda_selection_ledger, validation_formulas, validation_ledger,
)


# ---------------------------------------------------------------------------------------------
# Communication

def traffic(method: str) -> Traffic:
    """What a retrain of method id ``method`` sends (its family's esnfed_core.methods.Family.traffic)."""
    return Method.parse(method).traffic


# The federated methods with one reservoir shared by every client, in METHODS' order: the
# communication table's (a deep method's N = the total units of its layers; the heterogeneous
# methods' rows come from esnfed_stages/report/hetero_report.py)
COMMUNICATION_METHODS: tuple[str, ...] = tuple(
    m for m in METHODS if (method := Method.parse(m)).federated and not method.heterogeneous)


@dataclass(frozen=True)
class SelectionTrial:
    """What one model-selection trial recorded (its trial-XXXX.json): the bytes of its training
    messages as counted, and the sizes its validation scoring and FedAvg's other λ rounds follow
    from: N (``units``, its own config's), K training ``clients``, the λ values it scored on the
    validation users (``lambdas``; None where it scores no λ grid: a continual trial) and
    readout.bias (``bias``: N+1 readout columns)."""

    up_bytes: int
    down_bytes: int
    units: int
    clients: int
    lambdas: int | None
    bias: bool = False


@dataclass(frozen=True)
class Communication:
    """What one retrain of a federated method sent, as counted from its messages."""

    dataset: str
    pct: str
    method: str
    up_floats: int
    down_floats: int
    up_bytes: int
    down_bytes: int
    rounds: int
    clients: int
    units: int | None = None
    classes: int | None = None
    ip_rounds: int | None = None  # FedIP rounds (FedCLIP: summed over contexts)
    readouts: int | None = None   # IncFed readouts solved (FedIP: 1; FedCLIP: see split_rounds)
    inputs: int | None = None     # U, input features (the ensemble uploads each client's W_in)
    # FedCLIP: clients that trained at each context (a client without windows there sends nothing)
    # and the IP rounds run there; None when not recorded (every client then counts in every round)
    participants: tuple[int, ...] | None = None
    context_rounds: tuple[int, ...] | None = None
    # readout.bias: the readout's statistics and weights have N+1 columns (the bias entry)
    readout_bias: bool = False
    # The validation traffic a deployment would add (esnfed_core.validation_traffic), not in the
    # totals above: V, the validation users (None: unknown), and the λ values each retrain tries on
    # them (0: λ frozen, not chosen there; None: unknown)
    validation_clients: int | None = None
    lambda_grid: int | None = None
    # Model selection: the share's trial records (runs/select/<dataset>/<method>/<pct>/trial-*.json),
    # each with its own sizes (None: unknown, no finished selection or no trial record read)
    selection: tuple[SelectionTrial, ...] | None = None
    # federated.client_fraction (esnfed_core.sampling): each FedIP/FedCLIP IP round's clients were
    # sampled, max(1, ⌊f·C⌋) of the C taking part; readouts still go to all C. 1: every client.
    client_fraction: float = FULL
    # FedCLIP with federated.sampling_pool roster: the client-rounds that sent (g, b) at each context
    # (a round draws over all clients, so how many of the drawn have windows varies); None otherwise
    ip_senders: tuple[int, ...] | None = None

    def sampled(self, clients: int) -> int:
        """Clients that send in one IP round when ``clients`` take part (all of them at f = 1)."""
        return clients if self.client_fraction == FULL else sample_size(clients, self.client_fraction)

    def ip_sends(self, t: int, clients: int, rounds: int) -> int:
        """Client-rounds that sent (g, b) at context ``t`` where ``clients`` took part in ``rounds`` IP
        rounds: the recorded ``ip_senders[t]`` (roster sampling), else sampled(clients) per round."""
        return self.ip_senders[t] if self.ip_senders is not None else self.sampled(clients) * rounds

    @property
    def participations(self) -> int:
        """Client-rounds that sent something: clients × rounds, unless ``participants`` says that
        some clients sat a context out (FedCLIP: at context t, ``participants[t]`` clients in each of
        its IP rounds and readouts) or ``client_fraction`` sampled each IP round's clients."""
        per_context = _context_messages(self)
        if per_context is None:
            if self.client_fraction != FULL and splits_rounds(self.method) and self.ip_rounds is not None \
                    and self.readouts is not None:
                return self.sampled(self.clients) * self.ip_rounds + self.clients * self.readouts
            return self.clients * self.rounds
        return sum(self.ip_sends(t, p, r) + p * s for t, (p, (r, s)) in enumerate(zip(self.participants, per_context)))


def opt_int(v: Any) -> int | None:
    """A recorded size (``communication``'s units, classes, ...): None where it is not recorded."""
    return None if v is None else int(v)


# A ``communication`` entry (a saved model's .json, an assess file's share: docs/assess-contract.md):
# a federated method's message counts (esnfed_core.trial.communication), with the sizes some methods
# add (the heterogeneous ones: inputs, classes; absent or null when not recorded); null for the
# other methods. The communication table reads every federated entry's counts.
COMMUNICATION_COUNTS = ("up_floats", "down_floats", "up_bytes", "down_bytes", "rounds", "clients")
COMMUNICATION_SIZES = ("units", "classes", "ip_rounds", "readouts", "inputs")
# FedCLIP's, one integer per context (absent or null when not recorded): the clients that trained
# at the context and the IP rounds run there (esnfed_core.trial.fit_continual)
COMMUNICATION_CONTEXTS = ("participants", "context_rounds", "ip_senders")


def check_communication(key: str, value: Any, federated: bool) -> None:
    """ParameterError("<key>...: <problem>") unless ``value`` is null (only where the method is not
    federated) or an object of integer counts >= 0."""
    if value is None:
        if federated:
            raise ParameterError(f"{key}: missing (a federated method records its messages)")
        return
    if not isinstance(value, dict):
        raise ParameterError(f"{key}: expected an object of message counts or null, got {quote(value)}")
    for name in COMMUNICATION_COUNTS + COMMUNICATION_SIZES:
        v = value.get(name)
        if v is None and name in COMMUNICATION_SIZES:
            continue
        if name not in value:
            raise ParameterError(f"{key}.{name}: missing")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ParameterError(f"{key}.{name}: expected an integer >= 0, got {quote(v)}")
    lengths = set()
    for name in COMMUNICATION_CONTEXTS:
        v = value.get(name)
        if v is None:
            continue
        if not isinstance(v, list) or not v or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                       for i in v):
            raise ParameterError(f"{key}.{name}: expected a list of integers >= 0, one per context, got {quote(v)}")
        lengths.add(len(v))
    if "client_fraction" in value:  # federated.client_fraction < 1 (absent: 1)
        CLIENT_FRACTION.check(f"{key}.client_fraction", value["client_fraction"])
    if len(lengths) > 1:
        names = [name for name in COMMUNICATION_CONTEXTS if value.get(name) is not None]
        raise ParameterError(f"{key}: {' and '.join(names)} must have one entry per context each, got "
                             f"{' and '.join(str(len(value[name])) for name in names)}")


def splits_rounds(method: str) -> bool:
    """Whether ``method``'s rounds split into IP rounds and IncFed readouts (FedIP, FedCLIP): the
    communication table's IP rounds and readouts apply to it alone (see split_rounds)."""
    return traffic(method).ip_rounds


def split_rounds(method: str, rounds: int, contexts: int | None) -> tuple[int | None, int | None]:
    """(IP rounds, IncFed readouts) from the ledger's round count of a FedIP/FedCLIP retrain.

    The ledger counts distinct rounds per algorithm and the counts are summed: FedIP = its rounds
    + 1 IncFed round; FedCLIP naive/replay = IP rounds + one readout per context; FedCLIP joint =
    one IP round and one readout per loop iteration (it re-solves the readout every round).
    """
    t = traffic(method)
    if not t.ip_rounds:
        return None, None
    if t.readout_every_round:
        return rounds // 2, rounds // 2
    if not t.per_context:
        return rounds - 1, 1
    return (None, None) if contexts is None else (rounds - contexts, contexts)


def _context_messages(c: Communication) -> list[tuple[int, int]] | None:
    """FedCLIP's (IP rounds, readouts) at each context from the recorded ``context_rounds`` (naive
    and replay: one readout per context; joint: one per IP round, it re-solves every round), or
    None when ``participants`` or ``context_rounds`` is not recorded (or they disagree in length)."""
    if c.participants is None or c.context_rounds is None or len(c.participants) != len(c.context_rounds):
        return None
    joint = traffic(c.method).readout_every_round
    return [(r, r if joint else 1) for r in c.context_rounds]


def analytic_floats(c: Communication) -> tuple[str, str, int | None, int | None]:
    """PROTOCOL §3 and §5 formulas: (per-client text up, down, total up, total down).

    IncFed: up N² + N·C, down N·C, one round. FedAvg: N·C each way. FedIP and FedCLIP: 2N each
    way per IP round, plus an IncFed readout (up N² + N·C, down N·C) per readout solved. Each
    client sends in every round, except FedCLIP's where ``participants`` is recorded: at context t
    only the ``participants[t]`` clients with windows there send, in each of its rounds.
    Totals are None when a size they need (N, C, rounds, readouts) is unknown. With
    ``readout_bias`` the readout's N is N+1 (the bias entry); the IP messages keep 2N.
    """
    n, k, ncls = c.units, c.clients, c.classes
    ks = c.sampled(k)  # clients per IP round (federated.client_fraction; k at 1)
    r = None if n is None else n + int(c.readout_bias)  # the readout's columns
    rt = "(N+1)" if c.readout_bias else "N"
    t = traffic(c.method)  # a deep method sends as its shallow one
    known = n is not None and ncls is not None
    if t.sends == Sends.nothing:  # heterogeneous: each client alone, nothing crosses the network
        return ("0", "0", 0, 0)
    if t.sends == Sends.model:  # each client uploads its model once: reservoir + readout; no download
        ok = known and c.inputs is not None
        return (f"N·U+N²+2N+1 (own reservoir) + {rt}·C (readout)", "0",
                k * (n * c.inputs + n * n + 2 * n + 1 + r * ncls) if ok else None, 0 if ok else None)
    if t.sends == Sends.statistics:  # IncFed; align-α: IncFed over the aligned reservoirs
        return (f"{rt}²+{rt}·C", f"{rt}·C", k * (r * r + r * ncls) if known else None,
                k * r * ncls if known else None)
    if t.sends == Sends.readout:  # FedAvg
        return (f"{rt}·C", f"{rt}·C", k * r * ncls if known else None, k * r * ncls if known else None)
    if t.ip_rounds:  # FedIP, FedCLIP
        ip = "2N per IP round" if c.client_fraction == FULL else \
            f"2N per sampled IP round (max(1, ⌊{c.client_fraction:g}·clients⌋) per round)"
        texts = (f"{ip} + ({rt}²+{rt}·C) per readout", f"{ip} + {rt}·C per readout")
        per_context = _context_messages(c) if t.per_context else None
        if per_context is not None and known:  # the clients that took part at each context
            up = sum(c.ip_sends(t, p, ip) * 2 * n + p * s * (r * r + r * ncls)
                     for t, (p, (ip, s)) in enumerate(zip(c.participants, per_context)))
            down = sum(c.ip_sends(t, p, ip) * 2 * n + p * s * r * ncls
                       for t, (p, (ip, s)) in enumerate(zip(c.participants, per_context)))
            return (*texts, up, down)
        ok = known and c.ip_rounds is not None and c.readouts is not None
        up = ks * 2 * n * c.ip_rounds + k * c.readouts * (r * r + r * ncls) if ok else None
        down = ks * 2 * n * c.ip_rounds + k * c.readouts * r * ncls if ok else None
        return (*texts, up, down)
    return ("", "", None, None)


def validation_plan(c: Communication) -> ValidationPlan | None:
    """What one retrain of ``c.method`` scores on the validation users (esnfed_core.validation_traffic):
    IncFed, FedAvg and FedIP choose λ there (one evaluation of ``lambda_grid`` readouts; FedIP's
    with its (g, b)) unless λ is frozen; FedCLIP joint evaluates (g, b) and the readout after every
    IP round (its early stopping); naive and replay send nothing there. None: no validation traffic."""
    t = traffic(c.method)
    if t.lambda_on_validation and c.lambda_grid:
        return ValidationPlan(1, c.lambda_grid, t.ip_rounds, c.readout_bias)
    if t.readout_every_round and c.ip_rounds is not None:
        return ValidationPlan(c.ip_rounds, 1, t.ip_rounds, c.readout_bias)
    return None


def validation_columns(c: Communication) -> dict[str, Any]:
    """The validation-traffic columns of ``c``'s row: counted from the messages of
    :func:`esnfed_core.validation_traffic.validation_ledger` beside the formula, ``validation_match``
    whether they agree. ``validation_traffic``: True where counted, False where the retrain sends
    nothing to validation users (the cells do not apply), None where unknown (V, N, C, the λ grid or
    the rounds not recorded, or a method whose validation traffic is not modelled)."""
    out: dict[str, Any] = {k: None for k in VALIDATION_COLUMNS}
    out["validation_clients"] = c.validation_clients
    t = traffic(c.method)
    known_grid = c.lambda_grid is not None or not t.lambda_on_validation
    if not t.validation_modelled or not known_grid or (t.readout_every_round and c.ip_rounds is None):
        return {**out, "validation_traffic": None}
    plan = validation_plan(c)
    if plan is None:
        return {**out, "validation_traffic": False}
    if c.validation_clients is None or c.units is None or c.classes is None:
        return {**out, "validation_traffic": None}
    totals = validation_ledger(plan, c.validation_clients, c.units, c.classes).totals()
    a_down, a_up = analytic_validation(plan, c.validation_clients, c.units, c.classes)
    f_down, f_up = validation_formulas(plan)
    return {**out, "validation_traffic": True, "validation_evaluations": plan.evaluations,
            "validation_readouts": plan.readouts,
            "validation_down_floats": totals["down_floats"], "validation_down_bytes": totals["down_bytes"],
            "validation_up_floats": totals["up_floats"], "validation_up_bytes": totals["up_bytes"],
            "validation_formula_down": f_down, "validation_formula_up": f_up,
            "validation_analytic_down_floats": a_down, "validation_analytic_up_bytes": a_up,
            "validation_match": a_down == totals["down_floats"] and a_up == totals["up_bytes"]
            and totals["up_floats"] == 0}


def lambda_selection_columns(c: Communication) -> dict[str, Any]:
    """FedAvg's λ selection (retrain.lambda: select): the rounds of the L − 1 λ values the training
    totals leave out (esnfed_core.validation_traffic.lambda_selection_ledger), counted beside the
    formula, ``validation_lambda_match`` whether they agree. ``validation_lambda_traffic``: True where
    counted, False where the training clients send nothing per λ (every method but FedAvg, whose
    clients send statistics or (g, b) once; FedAvg with λ frozen), None where unknown."""
    out: dict[str, Any] = {k: None for k in LAMBDA_SELECTION_COLUMNS}
    t = traffic(c.method)
    if not t.validation_modelled or (t.round_per_lambda and c.lambda_grid is None):
        return {**out, "validation_lambda_traffic": None}
    if not t.round_per_lambda or c.lambda_grid == 0:
        return {**out, "validation_lambda_traffic": False}
    if c.units is None or c.classes is None:
        return {**out, "validation_lambda_traffic": None}
    extra = c.lambda_grid - 1
    totals = lambda_selection_ledger(extra, c.clients, c.units, c.classes, c.readout_bias).totals()
    analytic = analytic_lambda_selection(extra, c.clients, c.units, c.classes, c.readout_bias)
    return {"validation_lambda_traffic": True, "validation_lambda_rounds": extra,
            "validation_lambda_up_floats": totals["up_floats"], "validation_lambda_down_floats": totals["down_floats"],
            "validation_lambda_up_bytes": totals["up_bytes"], "validation_lambda_down_bytes": totals["down_bytes"],
            "validation_lambda_formula": lambda_selection_formula(extra, c.readout_bias),
            "validation_lambda_analytic_floats": analytic,
            "validation_lambda_match": totals["up_floats"] == analytic == totals["down_floats"]}


def trial_bytes(method: str, t: SelectionTrial, validation_clients: int, classes: int) -> int:
    """What one selection trial of ``method`` sent, up and down, at its own sizes: its training
    messages as recorded, the ``validation_clients``' scoring of its ``t.lambdas`` readouts
    (:func:`esnfed_core.validation_traffic.validation_ledger`, one evaluation; FedIP's with its (g, b))
    and FedAvg's rounds for its other λ values (``lambda_selection_ledger``: the trial's training
    totals keep the chosen λ's round only)."""
    sends = traffic(method)
    plan = ValidationPlan(1, t.lambdas, sends.ip_rounds, t.bias)
    val = validation_ledger(plan, validation_clients, t.units, classes).totals()
    lam = lambda_selection_ledger(t.lambdas - 1 if sends.round_per_lambda else 0, t.clients, t.units, classes,
                                  t.bias).totals()
    return sum(x["up_bytes"] + x["down_bytes"] for x in (val, lam)) + t.up_bytes + t.down_bytes


def selection_columns(c: Communication) -> dict[str, Any]:
    """``selection_trials``, the share's trial records, and ``selection_bytes``, the sum over them of
    :func:`trial_bytes`, each trial at its own N, K, λ values and bias (a selection trial always
    scores λ on the validation users, whatever retrain.lambda says). None where unknown (no trial
    records, V or C unknown) or not modelled (FedCLIP's bytes, heterogeneous methods)."""
    trials = None if c.selection is None else len(c.selection)
    if not counts_selection(c.method) or c.selection is None or c.validation_clients is None or c.classes is None:
        return {"selection_trials": trials, "selection_bytes": None}
    return {"selection_trials": trials,
            "selection_bytes": sum(trial_bytes(c.method, t, c.validation_clients, c.classes) for t in c.selection)}


def counts_selection(method: str) -> bool:
    """Whether ``method``'s selection trials are totalled (IncFed, FedAvg, FedIP and their deep ones,
    which score a λ grid on the validation users): each trial record must then say what λ values it
    scored. A FedCLIP trial's scoring on the validation users is not modelled
    (esnfed_core.validation_traffic): its trials are counted, their bytes not totalled."""
    return traffic(method).lambda_on_validation


# The validation-traffic columns of a communication row, after the training ones: the validation
# clients', FedAvg's λ selection, then the model selection's total
VALIDATION_COLUMNS = (
    "validation_clients", "validation_evaluations", "validation_readouts",
    "validation_down_floats", "validation_down_bytes", "validation_up_floats", "validation_up_bytes",
    "validation_formula_down", "validation_formula_up",
    "validation_analytic_down_floats", "validation_analytic_up_bytes", "validation_match",
)
LAMBDA_SELECTION_COLUMNS = (
    "validation_lambda_rounds", "validation_lambda_up_floats", "validation_lambda_down_floats",
    "validation_lambda_up_bytes", "validation_lambda_down_bytes", "validation_lambda_formula",
    "validation_lambda_analytic_floats", "validation_lambda_match",
)
SELECTION_COLUMNS = ("selection_trials", "selection_bytes")


def communication_rows(items: Iterable[Communication]) -> list[dict[str, Any]]:
    """One row per (dataset, pct, method): measured per client per round (per client-round that
    sent: ``participations``; None where none did: local runs no round) and total, analytic, and
    whether the two agree (``match``: None when an analytic total is unknown)."""
    rows = []
    for c in items:
        per = c.participations or None
        f_up, f_down, a_up, a_down = analytic_floats(c)
        match = None if a_up is None else (a_up == c.up_floats and a_down == c.down_floats)
        rows.append({
            "dataset": c.dataset, "pct": c.pct, "method": c.method, "units": c.units,
            "classes": c.classes, "clients": c.clients, "rounds": c.rounds,
            "ip_rounds": c.ip_rounds, "readouts": c.readouts,
            "up_floats_per_client_round": c.up_floats / per if per else None,
            "down_floats_per_client_round": c.down_floats / per if per else None,
            "up_bytes_per_client_round": c.up_bytes / per if per else None,
            "down_bytes_per_client_round": c.down_bytes / per if per else None,
            "up_floats": c.up_floats, "down_floats": c.down_floats,
            "up_bytes": c.up_bytes, "down_bytes": c.down_bytes,
            "formula_up": f_up, "formula_down": f_down,
            "analytic_up_floats": a_up, "analytic_down_floats": a_down,
            "match": match,
            "participations": c.participations, "participants": c.participants,
            "client_fraction": c.client_fraction,  # not a CSV column: the header's note names it
            **validation_columns(c), **lambda_selection_columns(c), **selection_columns(c),
        })
    return rows
