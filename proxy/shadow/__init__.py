"""Shadow mode: on a team's own traffic, did ctxproxy's rewriting change the agent's next step?

`settings` (a policy's `shadow:` section), `pairs` (which requests are sampled, what kind of
pair they make, what the rewrite left out), `equivalence` (whether two answers take the same
next step), `runner` (the background shadow calls), `report` (divergence rates against the A/A
floor, with bootstrap intervals). docs/shadow.md says how to turn it on and read it.
"""
