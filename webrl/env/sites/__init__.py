"""Embedded WebArena-style websites with task suites, a reference solver and per-episode state.

Five small sites on one local server (`EmbeddedSites`): a storefront (__SHOPPING__), its admin
(__SHOPPING_ADMIN__), a forum (__REDDIT__), a code host (__GITLAB__) and a map (__MAP__), with
seeded data, copy-on-write state per episode (`EmbeddedSitesBackend` sets the episode cookie),
train/test task suites in WebArena's format (`load_suite`), a scripted reference solver per
template (`ReferenceSolver`) and template re-instantiation for the curriculum (`reinstantiate`).
See `python -m webrl.env.sites --help` for the command line.
"""

from webrl.env.sites.backend import EmbeddedSitesBackend
from webrl.env.sites.embedded import EmbeddedSites
from webrl.env.sites.solver import ReferenceSolver, SolverError, respond
from webrl.env.sites.suite import load_suite, reinstantiate

__all__ = [
    "EmbeddedSites",
    "EmbeddedSitesBackend",
    "ReferenceSolver",
    "SolverError",
    "load_suite",
    "reinstantiate",
    "respond",
]
