"""m-TOPO (Baechi, Jeon et al., SoCC 2020, Sec. 4.1): fill devices in topological order.

Walk the ops in topological order and put them on the current device until it holds its
share of the step's memory, then move to the next device. The share is the step's total
static footprint (parameters plus every output, Baechi's conservative count) divided by
the number of devices; a device also counts as full when the memory estimate of
`PartialPlacement` says the op no longer fits. When the last device is full too, an op
goes to the first device with room for it (or the one with the most room).
Colocation groups follow their first-placed member.
"""

from __future__ import annotations

from eagle.baselines.scheduling import MemoryRetryPlacer, PartialPlacement
from simulator.graph import IntArray


class MTopoPlacer(MemoryRetryPlacer):
    def build(self, memory_fraction: float) -> IntArray:
        g = self.problem.graph
        plan = PartialPlacement(self.problem, self.candidates, memory_fraction)
        footprint = g.param_bytes + g.output_bytes
        share = footprint.sum() / len(self.candidates)
        filled = 0.0  # footprint placed on the current device
        k = 0
        for i in range(g.num_ops):
            if plan.free[i]:
                continue
            pin = plan.pinned(i)
            if pin >= 0:
                plan.place(i, pin)
                continue
            last = len(self.candidates) - 1
            while k < last and (
                filled + footprint[i] > share or not plan.fits(i, int(self.candidates[k]))
            ):
                k += 1
                filled = 0.0
            d = int(self.candidates[k])
            if not plan.fits(i, d):  # every device is full: the one with room, if any
                d = int(plan.eligible(i)[0])
            plan.place(i, d)
            filled += footprint[i]
        return plan.finish()
