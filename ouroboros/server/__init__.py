"""The model server: streaming chat requests (`client`), the bytes of a reply decoded
(`sse`, `chunks`, `reader`) within its bounds (`limits`), what a failure means (`errors`,
`retry`), which kind of server it is and how to name it (`kinds`, `identity`), and what it says
of its window and tokens (`discovery`, `tokenizer`).

Knows nothing of the window's policy. May import `window.sizes` (a message encoded once),
`config` and the base modules.
"""
