jq '.items |= map(if .category == "tools" then .price = ((.price * 110 | round) / 100) else . end)' work/inventory.json > work/inventory.tmp && mv work/inventory.tmp work/inventory.json
