"""What keeps the agent's shell in its place: the policy of what it may read, write and reach
(`policy`), the system calls behind it (`landlock`, `isolation`), tool processes that die with
the harness (`reaper`), the harness's secrets kept from the agent (`secrets`), one harness per
workspace (`lock`), and the three gathered for a run (`guard`).

May import `store` (files opened without following links, who holds a lock file), `config`
and the base modules.
"""
