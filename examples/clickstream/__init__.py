"""The clickstream example app: a website experimentation service (US, UK and JP marketplaces)."""
