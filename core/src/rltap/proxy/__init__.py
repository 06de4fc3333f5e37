"""rltap.proxy"""
