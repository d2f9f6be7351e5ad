"""Two-process gloo worker: the calibration rollouts are all failures, so rank 0's threshold choice raises.

Run as `python tests/calibration_failure_worker.py OUT_DIR`; Fabric(strategy="ddp") re-launches the script for
rank 1. The rollouts, the tasks and the ORM's scores are stubs; `ensure_orm_threshold` and the collectives are
real. Each rank writes `rank{r}.json`: the error it raised and after how many seconds. The process group's
collectives time out after `TIMEOUT_S`, so a rank left waiting for rank 0's choice raises only then. Rank 0 stays
alive until rank 1 has written (as a rank 0 still in its traceback or cleanup would), so its exit frees no one.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path

from sample_records import build_trajectory

TIMEOUT_S = 30


class FailedRollouts:
    """Stands for `ORMDataBuilder`: every calibration rollout failed (an SFT actor that solved none of them)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def run(self, name: str, engine: object, tasks: list, *, evaluation: bool = True) -> list:
        return [build_trajectory("a", eval_reward=0.0), build_trajectory("b", eval_reward=0.0)]


def main(out_dir: Path) -> None:
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import DDPStrategy

    import webrl.modules.orm
    import webrl.orm_threshold as orm_threshold
    from webrl.config import load_config
    from webrl.distributed import close_process_group
    from webrl.loop_config import WebRLConfig

    orm_threshold.calibration_tasks = lambda config, env: []
    orm_threshold.ORMDataBuilder = FailedRollouts
    webrl.modules.orm.orm_scorer = lambda *args, **kwargs: (lambda prompts: [0.9] * len(prompts), None)
    overrides = [f"output_dir={out_dir / 'run'}", f"model.cache_dir={out_dir / 'cache'}", "reward.calibration_tasks=2"]
    config = load_config(WebRLConfig, overrides)
    fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=timedelta(seconds=TIMEOUT_S)))
    fabric.launch()
    started = time.monotonic()
    error = None
    try:
        orm_threshold.ensure_orm_threshold(config, fabric, None, None, out_dir / "sft", out_dir / "orm")
    except Exception as err:  # what each rank raised is the result
        error = f"{type(err).__name__}: {err}"
    record = {"error": error, "seconds": time.monotonic() - started}
    (out_dir / f"rank{fabric.global_rank}.json").write_text(json.dumps(record))
    deadline = time.monotonic() + 2 * TIMEOUT_S
    while fabric.global_rank == 0 and not (out_dir / "rank1.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    close_process_group(fabric)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
