"""`memlens plan`: sweeps of a script's arguments, each point a simulation (issue 23).

A side package beside `simulation/`, which it drives through its public API
(`simulation.api.run_script`), one fresh process per point.
"""
