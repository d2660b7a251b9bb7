jq '.items |= sort_by(.sku)' work/inventory.json > work/inventory.tmp && mv work/inventory.tmp work/inventory.json
