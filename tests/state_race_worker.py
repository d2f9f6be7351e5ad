"""Two-process gloo worker: rank 1 reads late after each stage's end, and must still see the state rank 0 saw.

Run as `python tests/state_race_worker.py OUT_DIR`; Fabric(strategy="ddp") re-launches the script for rank 1.
The stages have no collective of their own (as phase 0's critic and actor), so rank 0 goes on to mark the next
stage while rank 1 is still reading. Rank 1's reads of `run_state.json` take `READ_DELAY_S` (a descheduled
process, a slow shared filesystem). Each rank writes `rank{r}.json`: the stages it saw done after each stage.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

READ_DELAY_S = 0.3
STAGES = ("curriculum", "rollouts", "labels", "replay", "critic", "actor", "sync", "evaluate")


def main(out_dir: Path) -> None:
    from lightning.fabric import Fabric

    from webrl import phase_record
    from webrl.distributed import close_process_group
    from webrl.run_layout import RunLayout
    from webrl.run_state import RunState

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    if fabric.global_rank == 1:

        class SlowReads(RunState):
            @classmethod
            def load(cls, path: Path) -> RunState:
                time.sleep(READ_DELAY_S)
                return RunState.load(path)

        phase_record.RunState = SlowReads
    layout = RunLayout(out_dir / "run")
    state = phase_record.shared_state(fabric, layout)
    seen = []
    for stage in STAGES:
        state = phase_record.finish_stage(fabric, state, layout, 0, stage, {f"time/{stage}_s": 0.0})
        seen.append([done for done in STAGES if state.is_done(0, done)])
    (out_dir / f"rank{fabric.global_rank}.json").write_text(json.dumps(seen))
    close_process_group(fabric)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
