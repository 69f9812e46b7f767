"""The model: a SimPy discrete-event simulation of a frontend, a dependency engine's lanes and
synchronisation (`simulate`, `issue`, `prices`, `host`, `cores`, `crowd`, `places`, `gil`,
`deps`), what ops cost (`profile`, with its pricing `rules` and JSON `fields`, `cost`, the
book's presets in `book`) and the closed forms it is checked against (`analytic`). It reads
Programs from `asyncsim.nd` and writes Traces; it never imports the lab.
"""
