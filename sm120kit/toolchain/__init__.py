"""The CUDA toolkit as data: which toolkit a recipe wants on a host (`toolkit_spec`) and the
Steps that install it (`toolkit_install`). Pure; `sm120kit/ops/toolkit.py` runs them."""
