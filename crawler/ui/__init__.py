"""The dashboard: live (``--ui``) and as a report file (``bloomcrawl report``)."""
