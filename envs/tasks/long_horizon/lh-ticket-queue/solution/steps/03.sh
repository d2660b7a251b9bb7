find inbox -type f -empty -delete && ./queue done
