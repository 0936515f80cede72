"""The model server: streaming chat requests (`client`), the bytes of a reply decoded
(`sse`, `chunks`, `reader`) within its bounds (`limits`), what a failure means (`errors`,
`retry`), which family of server it is (`kinds`: one class per family, each answering the window
questions, naming its tokenizer, saying whether the model takes tools and wording hints and
fixes), how to name it (`identity`), and what it says of its window and tokens (`discovery`,
`tokenizer`), asked through the run's one HTTP client (`connection`).

Knows nothing of the window's policy. May import `window.sizes` (a message encoded once),
`config` and the base modules.
"""
