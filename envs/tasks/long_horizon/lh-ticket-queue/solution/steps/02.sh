for f in inbox/*; do n=$(basename "$f" | tr '[:upper:]' '[:lower:]'); [ "inbox/$n" = "$f" ] || mv "$f" "inbox/$n"; done
./queue done
