"""Recipes: the `recipes/*.toml` files loaded and checked, the recipe a host's driver selects,
its typed resolved values, and the host's target arch."""
