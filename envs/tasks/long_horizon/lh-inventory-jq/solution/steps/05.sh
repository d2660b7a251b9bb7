jq '.items |= map(if .sku == "B-200" then .qty = 0 else . end)' work/inventory.json > work/inventory.tmp && mv work/inventory.tmp work/inventory.json
