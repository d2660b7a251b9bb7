printf -- '- fix: %s\n' slugify wrap median parse_kv to_roman > CHANGES.md
printf -- '- add: %s\n' from_roman __init__ cli tests >> CHANGES.md
