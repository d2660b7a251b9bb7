jq '.items |= map(select(.discontinued | not))' work/inventory.json > work/inventory.tmp && mv work/inventory.tmp work/inventory.json
