cd conf.d && ls | grep '\.ini$' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS
