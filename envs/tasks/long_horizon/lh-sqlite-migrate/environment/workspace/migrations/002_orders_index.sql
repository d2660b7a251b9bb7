CREATE INDEX idx_orders_user ON orders(user_id);
