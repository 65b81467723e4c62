"""The scaler room: KEDA's external scaler (``llmgw-scaler``) serving each model's demand from Redis."""
