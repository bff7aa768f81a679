"""kern-mine: mining facts from CUPTI captures (work in progress)."""
