"""m-TOPO (Baechi, Jeon et al., SoCC 2020, Sec. 4.1): fill devices in topological order.

Walk the ops in topological order and put them on the current device until it holds its
share of the step's memory, then move to the next device. As in Baechi, memory here is a
static, conservative count, the *footprint*: parameters, every output and scratch space,
as if nothing were ever freed. Each device may hold

    cap = share x total footprint + the largest footprint of one op,

the share being 1 / number of devices (Baechi's uniform m-TOPO). A colocation group is
placed when its first costly member comes, its whole footprint (its parameter
placeholders' included) counted at once, and its other members follow it; a unit (a
group, or a lone op) moves on to the next device when it would take the current one past
its cap, and the last device takes the rest. Placeholders follow their group or their
consumers (`PartialPlacement.finish`).

The footprint is far above what the step holds at any time (outputs are freed), so the
split does not look at the devices' capacity: Baechi trusts it to fit and so do we. When
the simulator still finds a device out of memory, the retry gives that device `shrink`
times its share (the others grow in proportion): the overflow moves on, in topological
order, instead of the whole tail piling onto the last device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eagle.baselines.scheduling import MemoryRetryPlacer, PartialPlacement
from eagle.problem import Problem
from simulator.graph import FloatArray, IntArray


class MTopoPlacer(MemoryRetryPlacer):
    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        # each candidate device's share of the total footprint
        self.shares: FloatArray = np.full(len(self.candidates), 1 / len(self.candidates))

    def build(self) -> IntArray:
        g = self.problem.graph
        plan = PartialPlacement(self.problem, self.candidates, 1.0)
        units, count = self.problem.placement_units
        op_footprint = g.param_bytes + g.output_bytes + g.temp_bytes
        footprint = np.zeros(count)  # of each placement unit
        np.add.at(footprint, units, op_footprint)
        cap = op_footprint.sum() * self.shares + op_footprint.max()
        used = np.zeros(len(cap))  # footprint placed on each candidate
        k, last = 0, len(cap) - 1
        for i in np.flatnonzero(~plan.free).tolist():
            d = plan.pinned(i)
            if d < 0:  # the first costly op of its unit: the whole unit goes here
                size = footprint[units[i]]
                while k < last and used[k] + size > cap[k]:
                    k += 1
                d = int(self.candidates[k])
                used[k] += size
            plan.place(i, d)
        return plan.finish()

    def retry(self, device: int) -> None:
        k = int(np.flatnonzero(self.candidates == device)[0])
        self.shares[k] *= self.shrink
        self.shares /= self.shares.sum()

    def tightened(self) -> str:
        names = self.problem.cluster.device_names
        split = ", ".join(
            f"{names[d]} {s:.0%}" for d, s in zip(self.candidates, self.shares, strict=True)
        )
        return f"smaller shares for the devices out of memory (last: {split})"

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "shares": self.shares.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        shares = np.asarray(state["shares"], dtype=np.float64)
        fractions = np.all(np.isfinite(shares) & (shares > 0)) and np.isclose(shares.sum(), 1)
        if shares.shape != self.shares.shape or not fractions:
            raise ValueError("its devices' shares are not one fraction per device")
        self.shares = shares
