"""The three-step pipeline example: analyze -> plan -> generate, and its panel."""
