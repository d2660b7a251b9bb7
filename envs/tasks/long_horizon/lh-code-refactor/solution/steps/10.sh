printf 'utils.py -> money.py\ncalc_total -> compute_total\n' > REFACTOR.md
