cd out && ls | grep -vx MANIFEST | LC_ALL=C sort | xargs sha256sum > MANIFEST
