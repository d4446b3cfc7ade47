"""Model families: everything that knows one family of vision-language models (Qwen3-VL today)
lives in its own package here; the rest of core asks it through a small protocol."""
