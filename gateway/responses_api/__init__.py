"""The Responses API's stored responses: which replica holds one, and the lookup before routing."""
