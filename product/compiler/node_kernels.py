"""Compiled loops over the product's nodes and their edges: what a guide's compilation does per token.

A node's row can span the vocabulary (128k tokens on Llama-3), and a regex with counters has hundreds of such
nodes (the email regex: 7 M (node, token) edges). numpy needs a pass and a temporary per step — gather the
contexts, mask, compute keys, look ids up, test liveness twice, select three ways — and those passes were most
of a compile. Each loop here makes one pass with no temporaries. Measured on Llama-3 (guide construction,
after the regex and its token transitions): email 3.3 -> 0.9 s, JSON object 640 -> 230 ms.

- ``NodeTable``: ids of product nodes (regex state, context) by key ``q * num_contexts + ctx``, an
  open-addressing hash table (a direct table would need states x contexts entries: 190 M at 100k states on
  Llama-3's 1,934 contexts). New keys get the next ids in the order they are met. Also a hash set.
- ``group_row``: a regex state's row of tokens grouped by (target state, token signature); tokens of one group
  move every node of the state alike, so a node's edges are a few hundred groups, not a row over the vocabulary
  (JSON object, side by side: GPT-2 2,883 groups for 1.4 M edges, guide 62 -> 26 ms; Llama-3 208 -> 86 ms).
- ``context_edges``, ``distinct_targets``: the edges (groups) of a node with no unfinished character; its
  successors. ``pending_edges``, ``pending_links``: the edges (single tokens) of nodes inside an unfinished
  character; their distinct targets.
- ``any_live_crossing``: whether row X is non-empty (then no merge class of the node is dead).
- ``split_rows``: rows X, Y, Z of an open node (see ``product.compiler.tables``), testing each edge's targets for
  liveness against their dead merge classes; a target with no partial liveness decides its whole group.
- ``live_inside``: row Y of pending nodes (single-token edges, inside the piece only).
- ``open_edges``: a lazy guide's candidate edges of an open node, each with whether its target is settled.
- ``read_tokens``: for a lazy guide, where a few tokens' bytes lead from one regex state (its edges out of a cycle).
- ``open_settled``: for a lazy guide, which (open node, merge class) pairs of a short row (the rest of a literal)
  one token takes to a settled node, without the nodes' edges built; ``open_forced_steps``, the pairs their allowed
  edges into forced nodes enter.
- ``pending_settled``: for a lazy guide, which (pending node, merge class) pairs one token takes to a node live
  in every merge class (most are decided so; ``product.runtime.lazy``).
- ``stale_predecessors``: the nodes the liveness fixpoint must compute again.
- ``entering_keys``, ``mark_dead``: the (node, merge class) pairs edges bring in; dead classes as bits.

A pending node's edges are single tokens; ``entering_keys`` takes them as groups of one token.

Leaves out: what X, Y, Z mean and how liveness is solved (``product.compiler.tables``); masks (``product.runtime.kernels.cpu``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from automata.dfa import group_by, lower_bound
from product.compiler.forbidden import forbids

__all__ = ["NodeTable", "group_row", "join_groups", "context_edges", "pending_edges", "pending_links",
           "distinct_targets", "any_live_crossing", "split_rows", "live_inside", "stale_predecessors", "entering_keys",
           "mark_dead", "pending_settled", "open_settled", "open_forced_steps", "open_edges", "read_tokens", "NONE_DEAD", "ALL_DEAD",
           "PARTIAL"]

_KERNEL = dict(cache=True, nogil=True, boundscheck=False)

NONE_DEAD, ALL_DEAD, PARTIAL = 0, 1, 2  # a node's liveness status: no merge class dead, all, some (bit row)


@njit(**_KERNEL)
def _lookup_or_insert(keys, done, ids, slot_keys, slot_ids, count, limit, new_keys):
    """Write the ids of ``keys[done:]`` into ``ids`` (-1 for negative keys), inserting unseen keys with ids
    ``count, count + 1, ...`` and recording them in ``new_keys[id]``. Stops before the table would hold more than
    ``limit`` keys; returns (keys done, keys in the table)."""
    mask = len(slot_keys) - 1
    for i in range(done, len(keys)):
        key = keys[i]
        if key < 0:
            ids[i] = -1
            continue
        slot = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
        while slot_keys[slot] != key and slot_keys[slot] >= 0:
            slot = (slot + 1) & mask
        if slot_keys[slot] < 0:
            if count == limit:
                return i, count
            slot_keys[slot] = key
            slot_ids[slot] = count
            new_keys[count] = key
            count += 1
        ids[i] = slot_ids[slot]
    return len(keys), count


class NodeTable:
    """Product node ids by key, or any set of non-negative int64 keys. Invariant: ids are ``0 .. len(self) - 1``,
    in the order keys were first met, ``keys[:len(self)]`` lists the keys by id, and the hash table is at most
    half full."""

    def __init__(self):
        self._slot_keys = np.full(1024, -1, dtype=np.int64)
        self._slot_ids = np.zeros(1024, dtype=np.int64)
        self.keys = np.zeros(512, dtype=np.int64)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def ids(self, keys: np.ndarray) -> np.ndarray:
        """The ids of ``keys`` (int64; negative keys give -1), numbering unseen keys from ``len(self)``."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        ids = np.empty(len(keys), dtype=np.int64)
        done = 0
        while True:
            done, self._count = _lookup_or_insert(keys, done, ids, self._slot_keys, self._slot_ids, self._count,
                                                  len(self.keys), self.keys)
            if done == len(keys):
                return ids
            self._grow()

    def _grow(self) -> None:
        """Double the table and rehash the known keys (their ids do not change)."""
        capacity = 2 * len(self._slot_keys)
        self._slot_keys = np.full(capacity, -1, dtype=np.int64)
        self._slot_ids = np.zeros(capacity, dtype=np.int64)
        known = self.keys[: self._count]
        self.keys = np.zeros(capacity // 2, dtype=np.int64)
        _lookup_or_insert(known, 0, np.empty(len(known), dtype=np.int64), self._slot_keys, self._slot_ids, 0,
                          len(self.keys), self.keys)


@njit(**_KERNEL)
def mark_dead(dead_bits, rows, counts, dead):
    """Set, in bit row ``rows[i]`` of ``dead_bits`` (cleared first), the bits of the next ``counts[i]`` classes
    of ``dead``."""
    k = 0
    for i in range(len(rows)):
        dead_bits[rows[i]] = 0
        for _ in range(counts[i]):
            c = dead[k]
            dead_bits[rows[i], c >> 3] |= np.uint8(1 << (c & 7))
            k += 1


@njit(**_KERNEL)
def group_row(tokens, targets, signature, num_signatures):
    """A regex state's row (``tokens`` moving to ``targets``) grouped by (target, ``signature[token]``): the
    tokens of a group move every node of the state alike. Returns the grouped tokens, the group bounds, and each
    group's target and signature."""
    n = len(tokens)
    keys = np.empty(n, dtype=np.int64)
    for i in range(n):
        keys[i] = np.int64(targets[i]) * num_signatures + signature[tokens[i]]
    size = 2
    while size < 2 * n:  # groups are at most n: the table stays at most half full
        size <<= 1
    ids = np.empty(n, dtype=np.int64)
    group_keys = np.empty(n, dtype=np.int64)
    _, count = _lookup_or_insert(keys, 0, ids, np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=np.int64),
                                 0, n, group_keys)
    grouped, bounds = group_by(ids, tokens, count)
    group_keys = group_keys[:count]
    return grouped.astype(np.int32), bounds, group_keys // num_signatures, group_keys % num_signatures


@njit(**_KERNEL)
def group_segments(tokens, targets, offsets, signature, num_signatures):
    """``group_row`` of every segment ``tokens[offsets[k]:offsets[k + 1]]`` in one call (a small regex has about a
    hundred segments, and a call and its Python around it cost ~8 µs each): the grouped tokens, their bounds per
    segment, each group's size, target and signature, and the group bounds per segment."""
    num_segments = len(offsets) - 1
    out_tokens = np.empty(len(tokens), dtype=np.int32)
    sizes = np.empty(len(tokens), dtype=np.int64)
    out_target = np.empty(len(tokens), dtype=np.int64)
    out_signature = np.empty(len(tokens), dtype=np.int64)
    token_bounds = np.zeros(num_segments + 1, dtype=np.int64)
    group_bounds = np.zeros(num_segments + 1, dtype=np.int64)
    t = g = 0
    for k in range(num_segments):
        lo, hi = offsets[k], offsets[k + 1]
        grouped, bounds, target, sign = group_row(tokens[lo:hi], targets[lo:hi], signature, num_signatures)
        for i in range(len(grouped)):
            out_tokens[t] = grouped[i]
            t += 1
        for j in range(len(target)):
            sizes[g] = bounds[j + 1] - bounds[j]
            out_target[g], out_signature[g] = target[j], sign[j]
            g += 1
        token_bounds[k + 1], group_bounds[k + 1] = t, g
    return out_tokens[:t], token_bounds, sizes[:g], out_target[:g], out_signature[:g], group_bounds


@njit(**_KERNEL)
def join_groups(segments, token_bounds, group_bounds, tokens, sizes, target, signature):
    """``group_row``'s output for a row made of ``segments`` (-1: none), each already grouped: segment k's grouped
    tokens ``tokens[token_bounds[k]:token_bounds[k + 1]]``, its groups' sizes, targets and signatures at
    ``group_bounds[k]:group_bounds[k + 1]``; the row's groups are theirs one after another."""
    num_tokens = num_groups = 0
    for k in segments:
        if k >= 0:
            num_tokens += token_bounds[k + 1] - token_bounds[k]
            num_groups += group_bounds[k + 1] - group_bounds[k]
    out_tokens = np.empty(num_tokens, dtype=np.int32)
    bounds = np.zeros(num_groups + 1, dtype=np.int64)
    out_target = np.empty(num_groups, dtype=np.int64)
    out_signature = np.empty(num_groups, dtype=np.int64)
    t = g = 0
    for k in segments:
        if k < 0:
            continue
        for i in range(token_bounds[k], token_bounds[k + 1]):
            out_tokens[t] = tokens[i]
            t += 1
        for j in range(group_bounds[k], group_bounds[k + 1]):
            bounds[g + 1] = bounds[g] + sizes[j]
            out_target[g], out_signature[g] = target[j], signature[j]
            g += 1
    return out_tokens, bounds, out_target, out_signature


@njit(**_KERNEL)
def context_edges(group_target, group_signature, group_bounds, inside_of_signature, boundary_of_signature,
                  num_contexts):
    """The edges of a node (q, ctx) with no unfinished character, by token group of q's row (the tokens of group
    g reach regex state ``group_target[g]`` and have signature ``group_signature[g]``, so the context moves them
    alike): the groups ``ctx`` lets continue the piece (``inside_of_signature[s] >= 0``) or cross a boundary,
    the keys of the nodes they reach each way (-1: not that way), and how many tokens those groups hold."""
    n = len(group_target)
    kept = np.empty(n, dtype=np.int64)
    inside = np.empty(n, dtype=np.int64)
    boundary = np.empty(n, dtype=np.int64)
    k = tokens = 0
    for g in range(n):
        a = inside_of_signature[group_signature[g]]
        b = boundary_of_signature[group_signature[g]]
        if a < 0 and b < 0:
            continue
        base = group_target[g] * num_contexts
        kept[k] = g
        inside[k] = base + a if a >= 0 else -1
        boundary[k] = base + b if b >= 0 else -1
        tokens += group_bounds[g + 1] - group_bounds[g]
        k += 1
    return kept[:k], inside[:k], boundary[:k], tokens


@njit(**_KERNEL)
def pending_edges(states, rows, pending_offsets, pending_tokens, pending_next, row_offsets, row_tokens, row_targets,
                  common_target, common_row, common_words, num_contexts):
    """The edges of pending nodes (node i: regex state ``states[i]``, pending row ``rows[i]`` of the canonical
    automaton): the row's completing tokens that the regex state also reads, each with the key of the node it
    reaches (target state, context after the token). A token in the state's common set (compact transitions:
    ``common_row[q] >= 0``) reaches ``common_target[q]``; the others are searched in the listed row. Both lists are
    sorted by token, so each search starts where the last one ended. Returns the edge count of each node, the
    tokens and the keys."""
    total = 0
    for i in range(len(states)):
        total += pending_offsets[rows[i] + 1] - pending_offsets[rows[i]]
    counts = np.zeros(len(states), dtype=np.int64)
    tokens = np.empty(total, dtype=np.int32)
    keys = np.empty(total, dtype=np.int64)
    k = 0
    for i in range(len(states)):
        lo, hi = row_offsets[states[i]], row_offsets[states[i] + 1]
        common = common_row[states[i]]
        for e in range(pending_offsets[rows[i]], pending_offsets[rows[i] + 1]):
            t = pending_tokens[e]
            if common >= 0 and (common_words[common, t >> 5] >> np.uint32(t & 31)) & 1:
                tokens[k] = t
                keys[k] = np.int64(common_target[states[i]]) * num_contexts + pending_next[e]
                counts[i] += 1
                k += 1
                continue
            lo = lower_bound(row_tokens, lo, hi, t)  # (the state's first token >= t)
            if lo < hi and row_tokens[lo] == t:
                tokens[k] = t
                keys[k] = np.int64(row_targets[lo]) * num_contexts + pending_next[e]
                counts[i] += 1
                k += 1
    return counts, tokens[:k], keys[:k]


@njit(**_KERNEL)
def distinct_targets(inside, boundary, num_nodes):
    """The distinct node ids (>= 0) among ``inside`` and ``boundary``, ascending."""
    seen = np.zeros(num_nodes, dtype=np.bool_)
    for i in range(len(inside)):
        if inside[i] >= 0:
            seen[inside[i]] = True
        if boundary[i] >= 0:
            seen[boundary[i]] = True
    return np.flatnonzero(seen)


@njit(**_KERNEL)
def pending_links(nodes, bounds, inside, num_nodes):
    """(source, target) for each pending node ``nodes[i]`` and each distinct target among its edges
    ``inside[bounds[i]:bounds[i + 1]]`` (a pending node reaches one target by many tokens)."""
    last = np.full(num_nodes, -1, dtype=np.int64)  # the last i that linked to each target
    sources = np.empty(len(inside), dtype=np.int64)
    targets = np.empty(len(inside), dtype=np.int64)
    k = 0
    for i in range(len(nodes)):
        for e in range(bounds[i], bounds[i + 1]):
            if last[inside[e]] != i:
                last[inside[e]] = i
                sources[k], targets[k] = nodes[i], inside[e]
                k += 1
    return sources[:k], targets[:k]


@njit(**_KERNEL)
def _live(node, mc, status, dead_row, dead_bits):
    if node < 0:
        return False
    s = status[node]
    if s == NONE_DEAD:
        return True
    if s == ALL_DEAD:
        return False
    return (dead_bits[dead_row[node], mc >> 3] >> (mc & 7)) & 1 == 0


@njit(**_KERNEL)
def any_live_crossing(groups, inside, boundary, group_tokens, group_bounds, after_class, status, dead_row,
                      dead_bits):
    """Whether some token group may only cross a boundary and reaches a live target (row X is not empty): then
    no merge class of the node is dead, whatever Y and Z hold. Stops at the first such token."""
    for j in range(len(groups)):
        b = boundary[j]
        if inside[j] >= 0 or b < 0 or status[b] == ALL_DEAD:
            continue
        if status[b] == NONE_DEAD:
            return True
        for i in range(group_bounds[groups[j]], group_bounds[groups[j] + 1]):
            if _live(b, after_class[group_tokens[i]], status, dead_row, dead_bits):
                return True
    return False


@njit(**_KERNEL)
def split_rows(groups, inside, boundary, group_tokens, group_bounds, after_class, status, dead_row, dead_bits):
    """Rows X, Y, Z of an open node whose edge j takes the tokens of group ``groups[j]`` to node ``inside[j]``
    inside the piece and ``boundary[j]`` across (-1 for neither): X = tokens that may only cross a boundary, to
    a live target; Y = tokens that may stay inside the piece, to a live target; Z = those of Y's candidates
    whose boundary target is live.

    A target with no dead merge class (or only dead ones) decides its whole group; only the groups of partial
    targets test each token's merge class. The three rows fill thirds of one buffer from one loop body (a helper
    per row taking the arrays as arguments made the loop 15x slower; rows of a 2-D buffer, 2x)."""
    n = 0
    for j in range(len(groups)):
        n += group_bounds[groups[j] + 1] - group_bounds[groups[j]]
    out = np.empty(3 * n, dtype=np.int32)  # X from 0, Y from n, Z from 2n
    nx, ny, nz = 0, n, 2 * n  # where each row's next token goes
    for j in range(len(groups)):
        lo, hi = group_bounds[groups[j]], group_bounds[groups[j] + 1]
        for side in range(1 if inside[j] < 0 else 2):  # (X, boundary) or (Y, inside) then (Z, boundary)
            if inside[j] < 0:
                node, k = boundary[j], nx
            elif side == 0:
                node, k = inside[j], ny
            else:
                node, k = boundary[j], nz
            if node < 0 or status[node] == ALL_DEAD:
                continue
            if status[node] == NONE_DEAD:
                for i in range(lo, hi):
                    out[k] = group_tokens[i]
                    k += 1
            else:
                dead = dead_row[node]
                for i in range(lo, hi):
                    mc = after_class[group_tokens[i]]
                    if not (dead_bits[dead, mc >> 3] >> (mc & 7)) & 1:
                        out[k] = group_tokens[i]
                        k += 1
            if inside[j] < 0:
                nx = k
            elif side == 0:
                ny = k
            else:
                nz = k
    return out[:nx], out[n:ny], out[2 * n:nz]


@njit(**_KERNEL)
def live_inside(bounds, tokens, inside, after_class, status, dead_row, dead_bits):
    """Row Y of nodes whose edges are single tokens that continue the piece (pending nodes: edge i moves by
    ``tokens[i]`` to node ``inside[i]``; node r's edges are ``bounds[r]:bounds[r + 1]``): the tokens reaching a
    live target, and their per-node bounds. (A group kernel fed groups of one token cost twice this.)"""
    Y = np.empty(len(tokens), dtype=np.int32)
    y_bounds = np.zeros(len(bounds), dtype=np.int64)
    k = 0
    for r in range(len(bounds) - 1):
        for i in range(bounds[r], bounds[r + 1]):
            node = inside[i]
            if status[node] == ALL_DEAD:
                continue
            if status[node] == PARTIAL:
                mc = after_class[tokens[i]]
                if (dead_bits[dead_row[node], mc >> 3] >> (mc & 7)) & 1:
                    continue
            Y[k] = tokens[i]
            k += 1
        y_bounds[r + 1] = k
    return Y[:k], y_bounds


@njit(**_KERNEL)
def stale_predecessors(changed, changed_at, computed_at, pred_bounds, pred_source, final):
    """The non-final nodes, ascending, computed no later than a successor among ``changed`` last changed
    (``pred_source[pred_bounds[n]:pred_bounds[n + 1]]`` are n's predecessors)."""
    stale = np.zeros(len(final), dtype=np.bool_)
    for n in changed:
        for k in range(pred_bounds[n], pred_bounds[n + 1]):
            source = pred_source[k]
            if computed_at[source] <= changed_at[n] and not final[source]:
                stale[source] = True
    return np.flatnonzero(stale)


@njit(**_KERNEL)
def entering_keys(groups, targets, group_tokens, group_bounds, after_class, narrow, num_merge_classes):
    """``target * num_merge_classes + after_class[t]`` for the tokens t of each edge (group ``groups[j]`` going to
    ``targets[j]``) whose target is a narrow node (see ``product.compiler.tables``: the merge classes that can enter it are
    its liveness candidates)."""
    n = 0
    for j in range(len(groups)):
        if targets[j] >= 0 and narrow[targets[j]]:
            n += group_bounds[groups[j] + 1] - group_bounds[groups[j]]
    keys = np.empty(n, dtype=np.int64)
    k = 0
    for j in range(len(groups)):
        target = targets[j]
        if target >= 0 and narrow[target]:
            for i in range(group_bounds[groups[j]], group_bounds[groups[j] + 1]):
                keys[k] = target * num_merge_classes + after_class[group_tokens[i]]
                k += 1
    return keys


@njit(inline="always")
def settled(q, ctx, accepting, context_final, break_possible, num_open):
    """Whether a lazy guide's node (q, ctx) is settled — live in every merge class without looking further: the text
    may end there, or (an open context) ``break_possible[q, ctx]``."""
    return (accepting[q] and context_final[ctx]) or (ctx < num_open and break_possible[q, ctx])


@njit(**_KERNEL)
def pending_settled(rows, classes, row_tokens, row_targets, pending_offsets, pending_tokens, pending_next, num_open,
                    accepting, context_final, break_possible, position, starts, ends, offsets, dense_row, dense):
    """For pairs i of one regex state (row ``row_tokens`` ascending, ``row_targets``), each a pending row
    ``rows[i]`` of the canonical automaton and a merge class ``classes[i]``: whether some completing token the
    state reads, not forbidden after the class, reaches a settled node — one where the text may end, or an open
    context where ``break_possible[target state, context]``. (True: the pair is live. False: only the forced
    targets can make it live.)"""
    alive = np.zeros(len(rows), dtype=np.bool_)
    for i in range(len(rows)):
        c = classes[i]
        for e in range(pending_offsets[rows[i]], pending_offsets[rows[i] + 1]):
            t = pending_tokens[e]
            a = lower_bound(row_tokens, 0, len(row_tokens), t)
            if a == len(row_tokens) or row_tokens[a] != t:
                continue
            if not settled(row_targets[a], pending_next[e], accepting, context_final, break_possible, num_open):
                continue
            if not forbids(c, t, position, starts, ends, offsets, dense_row, dense):
                alive[i] = True
                break
    return alive


@njit(**_KERNEL)
def open_edges(tokens, targets, inside_row, boundary_row, accepting, context_final, break_possible, num_open):
    """A lazy guide's candidate edges of an open node (regex row ``tokens`` -> ``targets``; the context's
    ``inside_row`` / ``boundary_row`` of next contexts, -1 where none): X edges (boundary only), then Y (inside),
    then Z (inside tokens that may also follow a boundary, to their boundary context). Returns tokens, target
    states, target contexts, kind (0 X, 1 Y, 2 Z) and whether each target is settled (the text may end there, or
    ``break_possible``). Two passes over the row: one counting each kind, one writing each edge at its kind's next
    place (a free string's row is most of the vocabulary: a pass per kind took ~1.3 ms of every such node on
    Llama-3)."""
    x = y = z = 0
    for i in range(len(tokens)):
        t = tokens[i]
        inside, boundary = inside_row[t], boundary_row[t]
        if inside >= 0:
            y += 1
            if boundary >= 0:
                z += 1
        elif boundary >= 0:
            x += 1
    count = x + y + z
    out_t = np.empty(count, dtype=np.int64)
    out_q = np.empty(count, dtype=np.int64)
    out_c = np.empty(count, dtype=np.int64)
    kind = np.empty(count, dtype=np.int8)
    is_settled = np.empty(count, dtype=np.bool_)
    at_x, at_y, at_z = 0, x, x + y
    for i in range(len(tokens)):
        t = tokens[i]
        inside, boundary = inside_row[t], boundary_row[t]
        if inside < 0 and boundary < 0:
            continue
        q = targets[i]
        if inside < 0:
            k, ctx, which = at_x, boundary, 0
            at_x += 1
        else:
            k, ctx, which = at_y, inside, 1
            at_y += 1
        out_t[k], out_q[k], out_c[k], kind[k] = t, q, ctx, which
        is_settled[k] = settled(q, ctx, accepting, context_final, break_possible, num_open)
        if inside >= 0 and boundary >= 0:
            k = at_z
            at_z += 1
            out_t[k], out_q[k], out_c[k], kind[k] = t, q, boundary, 2
            is_settled[k] = settled(q, boundary, accepting, context_final, break_possible, num_open)
    return out_t, out_q, out_c, kind, is_settled


@njit(**_KERNEL)
def read_tokens(table, state, tokens, token_blob, token_offsets):
    """The regex state each of ``tokens`` leads to from ``state``, its bytes read one by one (-1 where the table
    rejects one on the way): a lazy guide's edges out of a cycle, read for the few tokens holding a byte that leaves
    it rather than walking the vocabulary trie."""
    out = np.empty(len(tokens), dtype=np.int64)
    for i in range(len(tokens)):
        q = state
        t = tokens[i]
        for k in range(token_offsets[t], token_offsets[t + 1]):
            q = table[q, token_blob[k]]
            if q < 0:
                break
        out[i] = q
    return out


@njit(inline="always")
def allowed_context(inside, boundary, c, t, position, starts, ends, offsets, dense_row, dense):
    """The context an open node's token ``t`` is allowed into after merge class ``c`` (-1: none), given its
    ``inside`` and ``boundary`` next contexts (-1 where none): inside the piece (Y) iff not forbidden, a boundary
    only (X) always, the boundary of a token that may continue the piece (Z) iff forbidden."""
    if inside < 0:
        return boundary
    if forbids(c, t, position, starts, ends, offsets, dense_row, dense):
        return boundary
    return inside


@njit(**_KERNEL)
def open_settled(contexts, classes, row_tokens, row_targets, inside_next, boundary_next, within, num_open, accepting,
                 context_final, break_possible, position, starts, ends, offsets, dense_row, dense):
    """For pairs i of one regex state (row ``row_tokens`` -> ``row_targets``), each an open context ``contexts[i]``
    and a merge class ``classes[i]``: whether some token the state reads, allowed after the class
    (``allowed_context``), reaches a settled node (``settled``) whose regex state is ``within`` (bool per state;
    empty: any). A lazy guide's one-step liveness of the forced nodes of a literal, without their edges
    (``open_edges``) built. (True: the pair is live. False: only the forced targets can make it live.)"""
    alive = np.zeros(len(contexts), dtype=np.bool_)
    anywhere = len(within) == 0
    for i in range(len(contexts)):
        ctx, c = contexts[i], classes[i]
        for a in range(len(row_tokens)):
            q = row_targets[a]
            if not anywhere and not within[q]:
                continue
            t = row_tokens[a]
            target = allowed_context(inside_next[ctx, t], boundary_next[ctx, t], c, t, position, starts, ends,
                                     offsets, dense_row, dense)
            if target >= 0 and settled(q, target, accepting, context_final, break_possible, num_open):
                alive[i] = True
                break
    return alive


@njit(**_KERNEL)
def open_forced_steps(contexts, classes, row_tokens, row_targets, inside_next, boundary_next, after_class, num_open,
                      num_contexts, accepting, context_final, break_possible, position, starts, ends, offsets,
                      dense_row, dense):
    """For pairs i of one regex state (as ``open_settled``'s), the allowed edges into nodes that are not settled:
    per pair their count, and each one's target key (``q * num_contexts + ctx``) and the merge class its token
    leaves (``after_class``) — the pairs a lazy guide's liveness search enters next, without the nodes' edges
    built."""
    counts = np.zeros(len(contexts), dtype=np.int64)
    keys = np.empty(16, dtype=np.int64)
    leaves = np.empty(16, dtype=np.int64)
    size = 0
    for i in range(len(contexts)):
        ctx, c = contexts[i], classes[i]
        for a in range(len(row_tokens)):
            t, q = row_tokens[a], row_targets[a]
            target = allowed_context(inside_next[ctx, t], boundary_next[ctx, t], c, t, position, starts, ends,
                                     offsets, dense_row, dense)
            if target < 0 or settled(q, target, accepting, context_final, break_possible, num_open):
                continue
            if size == len(keys):
                keys = np.concatenate((keys, keys))
                leaves = np.concatenate((leaves, leaves))
            keys[size], leaves[size] = q * num_contexts + target, after_class[t]
            size += 1
            counts[i] += 1
    return counts, keys[:size], leaves[:size]
