"""Vigil's pure decision core: plain functions over dataclasses, no Django, no I/O shells.

Flag parsing (`flags`), failure classification (`classify`, `catalog`), the restart
policy (`policy`), hang and exit-hang detection (`hang`), collective analysis (`c4d`),
stack diagnosis (`stacks`), goodput (`goodput`), stragglers (`stragglers`) and node
reputation (`reputation`). The shells (`jobs`, `monitoring`, `notifications`,
`console`) call in; nothing here calls out. `make imports` enforces it.
"""
