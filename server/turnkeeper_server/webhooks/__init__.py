"""Webhooks of LangGraph API runs: where they may go (`addresses`), how they are
signed (`signing`), their settings (`settings`), and the loop that delivers them
from the journal's rows (`delivery`; the rows are journal/webhooks.py's)."""
